"""The Dashboard says how many cells its speed figures left out for disturbed timing (the results' status line,
the deployment view, the α × β view), and leaves them out; tiny models, a temporary database."""

from __future__ import annotations

import pytest
from evaluation.test_timing_figures import run_cells

import app
import storage
from ui import dashboard_handlers, sweep_view
from ui.markup import esc

pytestmark = pytest.mark.usefixtures("tiny_app")


@pytest.fixture
def dashboard():
    return dashboard_handlers.DashboardTab(app.build_service())


def stored_run(name: str, cells) -> int:
    run_id = storage.create_run(name, {"task": "review", "methods": ["llm", "specsteer"]})
    for cell in cells:
        storage.save_cell(run_id, cell)
    return run_id


def test_a_stored_run_says_which_speed_figures_left_a_paused_cell_out(dashboard):
    run_id = stored_run("paused", run_cells())
    view = dashboard.open_runs([run_id])
    assert "1 cell whose timing was disturbed" in view.status and "re-time it" in view.status
    table = view.table["value"]
    assert list(table["left out of speed"]) == ["0", "1"]
    assert list(table["tok/s"]) == ["50.00", "100.00"]
    steady = stored_run("steady", [cell for cell in run_cells() if not cell.stats.timing_disturbed])
    assert "disturbed" not in dashboard.open_runs([steady]).status
    both = dashboard.open_runs([run_id, steady])
    assert f"#{run_id}: 1 cell whose timing was disturbed" in both.status


def test_the_deployment_view_leaves_a_paused_generation_out_and_says_so(dashboard):
    run_id = stored_run("paused", run_cells())
    view = dashboard.deployment([run_id], "paper")
    assert "Projected 5 traced generations" in view.status
    assert "1 cell whose timing was disturbed" in view.status
    assert "quality figures keep" not in view.status  # a projection replays the passes: it leaves the cell out
    only = stored_run("only paused", [cell for cell in run_cells() if cell.stats.timing_disturbed])
    nothing = dashboard.deployment([only], "paper")
    assert "Nothing is left to project" in nothing.status and nothing.figure["visible"] is False


def test_the_sweep_view_says_it_too(dashboard):
    run_id = stored_run("paused", run_cells())
    view = sweep_view.sweep_view(dashboard.service, [run_id])
    assert esc("(SpecSteer α=0.1 β=1: 1)") in view.status or "(SpecSteer α=0.1 β=1: 1)" in view.status
