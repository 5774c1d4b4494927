"""ui.callers: the client a request counts against, for the queue's fair share and the join-attempt limits alike."""

from types import SimpleNamespace

from starlette.datastructures import Headers

from ui.callers import client_address


def _request(host: str | None, forwarded: list[str]) -> SimpleNamespace:
    raw = [(b"x-forwarded-for", value.encode()) for value in forwarded]
    return SimpleNamespace(client=SimpleNamespace(host=host) if host else None, headers=Headers(raw=raw))


def test_off_a_space_the_connection_counts_and_a_forwarded_header_is_ignored():
    assert client_address(_request("127.0.0.2", ["93.184.216.34"]), on_space=False) == "127.0.0.2"


def test_on_a_space_the_proxys_report_counts_over_every_header_line():
    # Every visitor reaches a Space through its proxy (a private address): keyed by the proxy, one stranger's
    # failed joins would lock out every annotator of a campaign.
    request = _request("10.16.0.5", ["1.1.1.1", "93.184.216.34, 10.0.0.7"])
    assert client_address(request, on_space=True) == "93.184.216.34"
    assert client_address(_request("10.16.0.5", []), on_space=True) == "10.16.0.5"


def test_a_call_without_a_connection_still_has_a_key():
    assert client_address(SimpleNamespace(), on_space=False)
