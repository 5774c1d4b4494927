"""Join codes, pure: their stored form, how a code is checked against it (old unsalted forms included), and
the limiter of failed joins (on a hand-driven clock)."""

from __future__ import annotations

import hashlib

import pytest

from specsteer.service.join_codes import (
    FAILURES_PER_CAMPAIGN,
    FAILURES_PER_CLIENT,
    WINDOW_S,
    JoinAttempts,
    check_code,
    issue_codes,
    new_code,
    stored_form,
)


def test_codes_are_fresh_128_bit_tokens():
    codes = {new_code() for _ in range(100)}
    assert len(codes) == 100 and all(len(code) == 22 for code in codes)  # 16 bytes in base64url


def test_the_stored_form_is_salted_fits_its_column_and_checks_the_code():
    code = new_code()
    first, second = stored_form(code), stored_form(code)
    assert first != second  # a salt per code: equal codes are not seen as equal
    assert len(first) <= 64 and first.startswith("s1$") and code not in first
    for stored in (first, second):
        assert check_code(code, stored).matches and check_code(f"  {code}\n", stored).matches  # spaces dropped
        assert check_code(code, stored).rehash is None
    assert not check_code(code[:-1], first).matches and not check_code(code + "x", first).matches


@pytest.mark.parametrize("stored", ["", "s1$", "s1$abc", "s2$AAAA$BBBB", "plain", "0" * 63])
def test_a_stored_form_this_version_does_not_write_opens_to_no_code(stored):
    assert not check_code("", stored).matches and not check_code("plain", stored).matches


@pytest.mark.parametrize("code", [None, 123, ["code"], {"code": 1}])
def test_a_code_that_is_not_text_never_matches(code):
    assert not check_code(code, stored_form("code")).matches


def test_an_unsalted_sha256_from_before_matches_and_asks_to_be_stored_salted():
    old = hashlib.sha256(b"Ab3_xY9z").hexdigest()
    checked = check_code("Ab3_xY9z", old)
    assert checked.matches and checked.rehash is not None and checked.rehash.startswith("s1$")
    assert check_code("Ab3_xY9z", checked.rehash).matches
    wrong = check_code("Ab3_xY9Z", old)
    assert not wrong.matches and wrong.rehash is None


def test_issued_codes_are_shown_once_and_kept_as_their_stored_forms():
    codes, stored = issue_codes(["ann", "bob"])
    assert set(codes) == set(stored) == {"ann", "bob"} and codes["ann"] != codes["bob"]
    assert all(check_code(codes[name], stored[name]).matches for name in codes)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failures_are_limited_per_client_and_campaign_and_forgotten_after_the_window():
    clock = Clock()
    attempts = JoinAttempts(clock=clock)
    for _ in range(FAILURES_PER_CAMPAIGN - 1):
        attempts.failed("10.0.0.1", 1)
    assert attempts.wait_s("10.0.0.1", 1) is None
    attempts.failed("10.0.0.1", 1)
    assert attempts.wait_s("10.0.0.1", 1) == pytest.approx(WINDOW_S)
    assert attempts.wait_s("10.0.0.1", 2) is None and attempts.wait_s("10.0.0.2", 1) is None
    clock.now += WINDOW_S / 3
    assert attempts.wait_s("10.0.0.1", 1) == pytest.approx(WINDOW_S * 2 / 3)
    clock.now += WINDOW_S
    assert attempts.wait_s("10.0.0.1", 1) is None


def test_failures_over_many_campaigns_are_limited_per_client():
    clock = Clock()
    attempts = JoinAttempts(clock=clock)
    for campaign in range(FAILURES_PER_CLIENT):  # one failure at each of many campaigns
        attempts.failed("10.0.0.1", campaign)
    assert attempts.wait_s("10.0.0.1", 10_000) is not None  # a campaign it never tried
    assert attempts.wait_s("10.0.0.2", 0) is None
