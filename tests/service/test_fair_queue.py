"""Two visitors on the launched app (tiny pair, loopback): one visitor's evaluation grid does not keep
another's generation waiting behind it, and only the page that started a grid can cancel it.

Fairness is measured in grid cells, not seconds: how many cells the grid finishes while the other
visitor's generation waits and runs.
"""

from __future__ import annotations

import time

import httpx
import pytest

pytest.importorskip("gradio_client")

from gradio_client import Client  # noqa: E402

import storage  # noqa: E402
from testkit import API_GENERATE  # noqa: E402
from ui import pairs  # noqa: E402

pytestmark = pytest.mark.slow  # the app served on loopback, grids queued by several clients

# 10 SpecSteer settings + SLM + LLM = 12 points × 3 records = 36 cells.
GRID = dict(
    source="sample",
    upload=None,
    task="review",
    records=3,
    methods=["slm", "llm", "specsteer"],
    alphas="1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1",
    betas="1",
    pairing=pairs.TINY_PAIRING_ID,
    runtime="auto",
    max_new_tokens=24,
    draft_len=2,
)
GRID_CELLS = 36
# The cells a grid may finish while another visitor's generation waits and runs: the one in flight when
# it asks, and those that start while its request travels through the queue to the models.
MAX_CELLS_WHILE_A_GENERATION_WAITS = 6


@pytest.fixture(scope="module")
def server(app_server):
    return app_server


def client_for(server) -> Client:
    url, data = server
    return Client(url, verbose=False, analytics_enabled=False, download_files=str(data / "downloads"))


def stored_cells(run_name: str) -> int:
    run = storage.get_run_by_name(run_name)
    return 0 if run is None else storage.SqlRunStore().run(run.id).cell_count


def wait_for_cells(run_name: str, count: int, timeout_s: float = 120.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cells = stored_cells(run_name)
        if cells >= count:
            return cells
        time.sleep(0.05)
    raise AssertionError(f"the grid {run_name!r} stored fewer than {count} cells in {timeout_s} s")


def test_a_generation_runs_between_another_visitors_grid_cells(server):
    grid_owner, visitor = client_for(server), client_for(server)
    visitor.predict("review", api_name="/load_sample")
    grid = grid_owner.submit(**GRID, run_name="fair-grid", api_name="/evaluate")
    try:
        wait_for_cells("fair-grid", 2)
        before = stored_cells("fair-grid")
        status, *_ = visitor.predict(**{**API_GENERATE, "max_new_tokens": 8}, api_name="/generate")
        after = stored_cells("fair-grid")
        print(f"grid cells finished while another visitor's generation waited and ran: {after - before}")
        assert "saved as generation" in status
        assert after < GRID_CELLS, "the grid finished before the generation ran"
        assert after - before <= MAX_CELLS_WHILE_A_GENERATION_WAITS, (
            f"the grid finished {after - before} cells while the generation waited"
        )
    finally:
        grid_owner.predict(api_name="/cancel_evaluate")
        grid.result(timeout=60)


def test_only_the_page_that_started_a_grid_can_cancel_it(server):
    owner, stranger = client_for(server), client_for(server)
    grid = owner.submit(**GRID, run_name="owned-grid", api_name="/evaluate")
    try:
        seen = wait_for_cells("owned-grid", 1)
        status, *_ = stranger.predict(api_name="/cancel_evaluate")
        assert "Cancelled" not in status and "Nothing of yours is running" in status
        url, _data = server
        with httpx.Client(base_url=url, timeout=30) as http:  # a raw call, with no page behind it
            event = http.post("gradio_api/call/cancel_evaluate", json={"data": []}).json()["event_id"]
            raw = http.get(f"gradio_api/call/cancel_evaluate/{event}").text
        assert "Cancelled" not in raw and "Nothing of yours is running" in raw
        wait_for_cells("owned-grid", seen + 2)  # the run goes on
        assert storage.get_run_by_name("owned-grid").status == "running"
    finally:
        status, *_ = owner.predict(api_name="/cancel_evaluate")
    grid.result(timeout=60)
    assert "cancelled" in status.lower()
    assert storage.get_run_by_name("owned-grid").status == "cancelled"
