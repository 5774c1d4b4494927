"""The fair share's policy without a server: the ledger of each client's jobs, who a client is (what it
cannot forge), how long until a job ends or a place frees, and the sentences a refused caller reads."""

from __future__ import annotations

import pytest

from specsteer.service.fair_share import (
    FairShare,
    Lane,
    busy_refusal,
    client_key,
    retry_after_s,
    share_refusal,
    soonest,
    soonest_place_s,
)


class Queue:
    """The jobs a queue holds, as the ledger asks about them."""

    def __init__(self) -> None:
        self.held: set[str] = set()

    def add(self, ledger: FairShare, client: str, job: str) -> bool:
        reservation = ledger.reserve(client)
        if reservation is None:
            return False
        self.held.add(job)
        ledger.bind(reservation, job)
        return True


def test_a_client_holds_at_most_its_share_and_each_ended_job_frees_a_place():
    queue = Queue()
    ledger = FairShare(4, queue.held.__contains__)
    accepted = [queue.add(ledger, "10.0.0.1", f"job-{i}") for i in range(70)]
    assert accepted.count(True) == 4 and accepted[:4] == [True] * 4
    assert ledger.held("10.0.0.1") == 4 and ledger.jobs("10.0.0.1") == ("job-0", "job-1", "job-2", "job-3")
    # Another client has a share of its own.
    assert queue.add(ledger, "10.0.0.2", "other")
    # A job that ends (finished, failed, cancelled, dropped with its connection) leaves the queue: one place.
    queue.held.discard("job-1")
    assert ledger.held("10.0.0.1") == 3
    assert queue.add(ledger, "10.0.0.1", "job-70")
    assert not queue.add(ledger, "10.0.0.1", "job-71")
    queue.held.clear()
    assert ledger.held("10.0.0.1") == 0 and ledger.jobs("10.0.0.1") == ()


def test_a_reserved_place_counts_until_it_is_bound_or_released():
    """Two calls of one client arriving together cannot both slip under the share while the queue takes the
    first: the place counts from the reservation."""
    ledger = FairShare(2, lambda job: True)
    first, second = ledger.reserve("a"), ledger.reserve("a")
    assert first is not None and second is not None
    assert ledger.reserve("a") is None
    ledger.release(second)  # the queue did not take it
    third = ledger.reserve("a")
    assert third is not None
    ledger.bind(first, "job-1")
    ledger.bind(third, "job-2")
    assert ledger.held("a") == 2 and ledger.reserve("a") is None


def test_a_share_below_one_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        FairShare(0, lambda job: True)


# --------------------------------------------------------------------------- who a client is


def test_off_a_space_the_client_is_the_connections_address_whatever_headers_say():
    assert client_key("127.0.0.2", "93.184.216.34", behind_space_proxy=False) == "127.0.0.2"
    assert client_key("127.0.0.2", None, behind_space_proxy=False) == "127.0.0.2"
    assert client_key(None, None, behind_space_proxy=False) == "unknown"


def test_on_a_space_the_client_is_the_rightmost_global_address_the_proxy_reports():
    proxy = "10.16.3.80"  # every connection comes from the Space's proxy
    assert client_key(proxy, "93.184.216.34", behind_space_proxy=True) == "93.184.216.34"
    # Whatever a caller writes in the header itself stays to the left of what the proxy adds.
    forged = "1.1.1.1, 9.9.9.9, 93.184.216.34"
    assert client_key(proxy, forged, behind_space_proxy=True) == "93.184.216.34"
    # The proxies' own hops (private addresses) after the client are skipped.
    assert client_key(proxy, "1.1.1.1, 93.184.216.34, 10.0.0.5, 10.0.0.6", behind_space_proxy=True) == ("93.184.216.34")
    # Forged private addresses do not help either: the proxy's entry for the caller is still to their right.
    assert client_key(proxy, "10.9.9.9, 93.184.216.34", behind_space_proxy=True) == "93.184.216.34"
    # No global address at all: the rightmost one (the proxy's own report), never the caller's leftmost.
    assert client_key(proxy, "10.9.9.9, 10.0.0.5", behind_space_proxy=True) == "10.0.0.5"
    # No header, or nothing readable in it: the connection's address.
    assert client_key(proxy, None, behind_space_proxy=True) == proxy
    assert client_key(proxy, "unknown, <script>", behind_space_proxy=True) == proxy


def test_made_up_session_hashes_and_ports_do_not_make_another_client():
    """The key holds only the address: a caller's session hash is not part of it, and a port is dropped."""
    assert client_key("93.184.216.34", "1.1.1.1:4711", behind_space_proxy=True) == "1.1.1.1"
    assert client_key("10.0.0.1", "[2001:db8::1]:443", behind_space_proxy=True) == "2001:db8::/64"


def test_an_ipv6_client_is_its_64_prefix_and_a_mapped_ipv4_is_the_ipv4_address():
    first = client_key("2001:db8:1:2::1", None, behind_space_proxy=False)
    second = client_key("2001:db8:1:2:ffff::9", None, behind_space_proxy=False)
    assert first == second == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1", None, behind_space_proxy=False) != first
    assert client_key("::ffff:192.0.2.7", None, behind_space_proxy=False) == "192.0.2.7"


# --------------------------------------------------------------------------- how long until


def test_a_one_slot_lane_starts_its_waiting_jobs_one_after_another():
    lane = Lane(slots=1, running_left_s=(5.0,), waiting_s=(10.0, 10.0, 20.0))
    assert lane.starts_s() == [5.0, 15.0, 25.0]
    assert lane.waiting_end_s(0) == 15.0 and lane.waiting_end_s(2) == 45.0
    assert lane.running_end_s() == 5.0


def test_a_lane_with_free_slots_starts_at_once_and_shares_its_slots():
    assert Lane(slots=2, running_left_s=(8.0,), waiting_s=(4.0, 4.0, 4.0)).starts_s() == [0.0, 4.0, 8.0]
    assert Lane(slots=None, waiting_s=(4.0, None)).starts_s() == [0.0, 0.0]
    # A job past its expected duration is expected to end now, not in the past.
    assert Lane(slots=1, running_left_s=(-3.0,), waiting_s=(4.0,)).starts_s() == [0.0]


def test_an_unknown_duration_leaves_what_follows_unknown():
    assert Lane(slots=1, running_left_s=(None,), waiting_s=(4.0,)).starts_s() == [None]
    lane = Lane(slots=1, running_left_s=(2.0,), waiting_s=(None, 4.0))
    assert lane.starts_s() == [2.0, None]
    assert lane.waiting_end_s(0) is None
    assert Lane(slots=1, running_left_s=(None,)).running_end_s() is None


def test_a_place_frees_when_the_first_waiting_job_of_any_lane_starts():
    lanes = [
        Lane(slots=1, running_left_s=(30.0,), waiting_s=(30.0,) * 40),
        Lane(slots=1, running_left_s=(12.0,), waiting_s=(5.0,) * 20),
        Lane(slots=4, running_left_s=(1.0,)),  # nothing waits here
    ]
    assert soonest_place_s(lanes) == 12.0
    assert soonest_place_s([Lane(slots=1, running_left_s=(None,), waiting_s=(1.0,))]) is None
    assert soonest([None, 7.0, 3.0]) == 3.0 and soonest([None]) is None


def test_the_sentences_say_how_many_are_held_and_when_to_retry():
    refused = share_refusal(4, 4, 12.3)
    assert "You already hold 4 model jobs" in refused and "(4)" in refused and "about 13 s" in refused
    unknown = share_refusal(4, 4, None)
    assert "no estimate" in unknown and "try again in a minute" in unknown
    busy = busy_refusal(64, 0.2)
    assert busy.startswith("The app is busy") and "64 jobs are waiting" in busy and "about 1 s" in busy
    assert retry_after_s(12.3) == 13 and retry_after_s(0.0) == 1 and retry_after_s(None) == 60
