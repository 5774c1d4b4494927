"""A grid's cells on a local Ray cluster of two workers, against the sequential runner on the tiny fp32 pair:
the same cells and numbers, a worker killed mid-cell, resume and cancel, the command line; and the executor's
parts that need no Ray."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

import storage
from specsteer.cli import evaluate as evaluate_cli
from specsteer.data.sources import bundled_sample_path
from specsteer.evaluation.grid import (
    EvalResult,
    EvalSpec,
    GridProgress,
    RecordPair,
    open_grid_run,
    run_cell,
    run_grid,
    run_grid_events,
)
from specsteer.evaluation.grid.events import CellFailure
from specsteer.evaluation.grid.plan import GridCell
from specsteer.evaluation.grid.ray_executor import GridWorker, RayCluster, _by_record, _worker_shape, run_grid_on_ray
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
from specsteer.stores.runs import CellResult
from testkit import require_ray

REPO = Path(__file__).resolve().parents[2]
SAMPLE = str(bundled_sample_path("review"))
# Three records, four points each (two SpecSteer alphas among them): short generations on the tiny fp32 pair.
SPEC = EvalSpec(
    data=SAMPLE,
    task="review",
    methods=("llm", "slm+", "specsteer"),
    alphas=(1.0, 0.1),
    max_new_tokens=6,
    retrieval_k=1,
    pairing=TEST_PAIRING_ID,
    dtype="fp32",
)
TWO_WORKERS = RayCluster(workers=2, worker_cpus=1)

pytestmark = pytest.mark.usefixtures("fresh_engines")


def numbers(cell: CellResult) -> tuple:
    """What a cell computed, without its times (which differ from run to run)."""
    stats = cell.stats
    return (
        cell.output,
        dict(cell.rouge),
        stats.new_tokens,
        stats.rounds,
        stats.drafted,
        stats.accepted,
        stats.verified,
        dict(stats.forward_calls),
        stats.uplink_bytes,
        stats.downlink_bytes,
        stats.stop_reason,
        stats.sent_text,
    )


def by_key(cells: list[CellResult]) -> dict[str, tuple]:
    assert len({cell.key for cell in cells}) == len(cells)  # each cell stored once
    return {cell.key: numbers(cell) for cell in cells}


@pytest.fixture(scope="module")
def pair():
    return shared_tiny_pair()


@pytest.fixture(scope="module")
def sequential(pair, tmp_path_factory) -> dict[str, tuple]:
    """The sequential runner's cells of SPEC, by key."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sequential') / 'runs.db'}"
    result = run_grid(replace(SPEC, run_name="sequential"), storage.SqlRunStore(url), pair=pair)
    assert result.status == "finished"
    return by_key(result.cells)


def worker_hook(log: Path, exit_plan: Path):
    """Run in every worker process as it starts: each cell attempted is logged (``pid key``), and the cell
    ``exit_plan`` names (when it exists) ends its worker's process the first time it starts, as a kill would."""

    def hook() -> None:
        from specsteer.evaluation.grid import ray_executor

        attempt = ray_executor.attempt_cell

        def logged(serving, cell, prepared, spec, cancel):
            with log.open("a") as file:
                file.write(f"{os.getpid()} {cell.key}\n")
            if exit_plan.exists() and exit_plan.read_text() == cell.key:
                exit_plan.rename(exit_plan.with_suffix(".done"))
                os._exit(1)
            return attempt(serving, cell, prepared, spec, cancel)

        ray_executor.attempt_cell = logged

    return hook


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster of two CPUs for the module's runs, its workers hooked (:func:`worker_hook`)."""
    require_ray()
    import ray

    files = tmp_path_factory.mktemp("ray")
    log, exit_plan = files / "cells.log", files / "exit-at"
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level="warning",
        runtime_env={"worker_process_setup_hook": worker_hook(log, exit_plan)},
    )
    yield log, exit_plan
    ray.shutdown()


def attempts(log: Path) -> list[tuple[str, str]]:
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()] if log.exists() else []


def ray_run(spec: EvalSpec, url: str, pair, cancel: threading.Event | None = None) -> list:
    return list(run_grid_on_ray(spec, storage.SqlRunStore(url), TWO_WORKERS, pair=pair, cancel=cancel))


# --------------------------------------------------------------------------- on a local cluster of two workers


@pytest.mark.slow
def test_two_workers_store_the_sequential_runs_cells_and_numbers(cluster, pair, sequential, db_url):
    log, _ = cluster
    log.unlink(missing_ok=True)
    events = ray_run(replace(SPEC, run_name="on-ray"), db_url, pair)
    result = events.pop()
    assert isinstance(result, EvalResult) and result.status == "finished" and not result.failures
    assert result.computed == len(sequential) == 12
    assert by_key(result.cells) == sequential
    assert by_key(storage.run_cells(result.run_id, url=db_url)) == sequential
    # Progress as the sequential runner reports it: loading, warm-up, a running event per cell, the end.
    assert [event.stage for event in events[:2]] == ["loading", "warmup"]
    running = [event for event in events if event.stage == "running"]
    assert sorted(f"{event.record_id}:{event.point}" for event in running) == sorted(
        f"{cell.record_id}:{cell.point}" for cell in result.cells
    )
    assert (events[-1].stage, events[-1].done, events[-1].total) == ("finished", 12, 12)
    # Both workers ran cells, and every cell of a record ran on one worker.
    ran = attempts(log)
    assert len(ran) == 12 and len({pid for pid, _ in ran}) == 2
    record_of = {cell.key: cell.record_id for cell in result.cells}
    workers_of_record: dict[str, set[str]] = {}
    for pid, key in ran:
        workers_of_record.setdefault(record_of[key], set()).add(pid)
    assert len(workers_of_record) == 3 and all(len(pids) == 1 for pids in workers_of_record.values())


@pytest.mark.slow
def test_a_worker_killed_mid_cell_has_the_cell_run_again_and_stored_once(cluster, pair, sequential, url):
    log, exit_plan = cluster
    log.unlink(missing_ok=True)
    run, _ = open_grid_run(replace(SPEC, run_name="probe"), storage.SqlRunStore(url), pair)
    killed = run.pending[5].key  # the second record's second cell: mid-grid, with cells of the record before it
    exit_plan.write_text(killed)
    result = ray_run(replace(SPEC, run_name="killed"), url, pair).pop()
    assert exit_plan.with_suffix(".done").exists() and not exit_plan.exists()  # the worker did die mid-cell
    assert result.status == "finished" and not result.failures
    assert by_key(storage.run_cells(result.run_id, url=url)) == sequential  # every cell once, the same numbers
    tries = [pid for pid, key in attempts(log) if key == killed]
    assert len(tries) == 2 and tries[0] != tries[1]  # started in one process, finished in its restart


@pytest.mark.slow
def test_a_run_resumed_on_ray_cancelled_and_resumed_from_the_command_line(
    cluster, pair, sequential, tmp_path, monkeypatch, capsys
):
    database = f"sqlite:///{tmp_path / 'runs.db'}"
    store = storage.SqlRunStore(database)
    spec = replace(SPEC, run_name="resumed")
    events = run_grid_events(spec, store, pair=pair)
    for event in events:
        if event.stage == "running" and event.done == 3:
            break
    events.close()  # three cells stored by the sequential runner, the run left cancelled

    cancel = threading.Event()
    seen = []
    for event in run_grid_on_ray(spec, store, TWO_WORKERS, pair=pair, cancel=cancel):
        seen.append(event)
        if isinstance(event, GridProgress) and event.stage == "running" and event.done >= 5:
            cancel.set()  # the workers' generations in flight stop within a token
    result = seen.pop()
    assert seen[0].done == 3  # the pending cells only
    assert result.status == "cancelled" and 2 <= result.computed < 9 and len(result.cells) == 3 + result.computed
    assert seen[-1].stage == "cancelled" and storage.get_run_by_name("resumed", url=database).status == "cancelled"
    assert {cell.key: numbers(cell) for cell in result.cells}.items() <= sequential.items()

    monkeypatch.setattr(evaluate_cli, "shared_tiny_pair", lambda: pair)
    arguments = ["--data", SAMPLE, "--task", "review", "--methods", "llm,slm+,specsteer", "--alpha", "1,0.1"]
    arguments += ["--max-new-tokens", "6", "--retrieval-k", "1", "--pairing", TEST_PAIRING_ID, "--dtype", "fp32"]
    arguments += ["--database", database, "--run-name", "resumed", "--ray", "auto", "--ray-workers", "2"]
    assert evaluate_cli.main(arguments) == 0, capsys.readouterr().err
    assert f"[{3 + result.computed}/12] loading" in capsys.readouterr().err
    run = storage.get_run_by_name("resumed", url=database)
    assert run.status == "finished" and by_key(storage.run_cells(run.id, url=database)) == sequential


# --------------------------------------------------------------------------- without Ray


def test_ray_flags_are_checked_before_anything_runs(capsys):
    arguments = ["--data", "sample", "--task", "review", "--pairing", TEST_PAIRING_ID]
    assert evaluate_cli.main([*arguments, "--ray-workers", "2"]) == 2
    assert "--ray-workers and --ray-worker-cpus go with --ray" in capsys.readouterr().err
    assert evaluate_cli.main([*arguments, "--ray", "auto", "--ray-workers", "0"]) == 2
    assert "--ray-workers must be at least 1" in capsys.readouterr().err


def test_without_ray_installed_the_flag_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    from specsteer.evaluation.grid import ray_executor

    monkeypatch.setattr(ray_executor, "ray_status", lambda: (False, "Ray is not installed (test)"))
    arguments = ["--data", "sample", "--task", "review", "--pairing", TEST_PAIRING_ID, "--ray", "auto"]
    assert evaluate_cli.main([*arguments, "--database", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "Ray is not installed" in capsys.readouterr().err


def test_ray_is_an_extra_the_space_never_installs_and_the_library_never_imports_unasked():
    """A Space installs requirements.txt (and what it includes) alone; setup.sh --dev (CI) the extra too."""

    def lines(name: str) -> list[str]:
        text = (REPO / name).read_text().splitlines()
        own = [line.split("#")[0].strip() for line in text if line.split("#")[0].strip()]
        included = [line.removeprefix("-r").strip() for line in own if line.startswith("-r")]
        return own + [line for name in included for line in lines(name)]

    assert not [line for line in lines("requirements.txt") if re.match(r"ray\b", line)]
    assert [line for line in lines("requirements-ray.txt") if line.startswith("ray")] == ["ray==2.60.0"]
    assert "ray==2.60.0" in lines("requirements-dev.txt")
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, specsteer.cli.evaluate, specsteer.evaluation.grid; print('ray' in sys.modules)",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.stdout.strip() == "False", imported.stderr


def test_a_worker_runs_a_cell_as_the_sequential_runner_does_and_stops_when_told(pair, tmp_path):
    run, _ = open_grid_run(
        replace(SPEC, run_name="worker"), storage.SqlRunStore(f"sqlite:///{tmp_path / 'w.db'}"), pair
    )
    worker = GridWorker(replace(run, records=[], prepared={}, pending=[]))
    cell = run.pending[3]
    prepared = run.prepared[cell.record.id]
    worker.open(prepared)
    outcome = worker.run(cell, prepared)
    assert isinstance(outcome, CellResult)
    alone = run_cell(RecordPair(pair), cell, prepared, run.spec, threading.Event())
    assert alone is not None and numbers(outcome) == numbers(alone)
    worker.stop()
    assert worker.run(cell, prepared) is None


def test_a_worker_fails_a_cell_that_raises_and_goes_on(pair, tmp_path, monkeypatch):
    run, _ = open_grid_run(
        replace(SPEC, run_name="worker"), storage.SqlRunStore(f"sqlite:///{tmp_path / 'w.db'}"), pair
    )
    worker = GridWorker(replace(run, records=[], prepared={}, pending=[]))
    cell = run.pending[0]
    prepared = run.prepared[cell.record.id]
    from specsteer.evaluation.grid import runner

    def broken(*_args):
        raise RuntimeError("a model pass failed")

    monkeypatch.setattr(runner, "run_cell", broken)
    outcome = worker.run(cell, prepared)
    assert isinstance(outcome, CellFailure) and outcome.message == "RuntimeError: a model pass failed"


def test_cells_are_grouped_by_record_in_run_order(pair, tmp_path):
    run, _ = open_grid_run(
        replace(SPEC, run_name="groups"), storage.SqlRunStore(f"sqlite:///{tmp_path / 'g.db'}"), pair
    )
    groups = _by_record(run.pending)
    assert [[cell.record.id for cell in group] for group in groups] == [[record.id] * 4 for record in run.records]
    assert [cell for group in groups for cell in group] == run.pending
    assert all(isinstance(cell, GridCell) for group in groups for cell in group)


@pytest.mark.parametrize(
    ("cluster_asked", "node_cpus", "shape"),
    [
        (RayCluster(), [16, 16, 16], (3, 16)),  # one worker per node, each on its node's CPUs
        (RayCluster(workers=2), [2], (2, 1)),  # two on one node share it
        (RayCluster(workers=4), [8, 4], (4, 2)),  # the smallest node sets the share
        (RayCluster(workers=2, worker_cpus=3), [4, 4], (2, 3)),
    ],
)
def test_worker_shape(cluster_asked, node_cpus, shape):
    nodes = [{"Alive": True, "Resources": {"CPU": float(cpus)}} for cpus in node_cpus]
    assert _worker_shape(cluster_asked, [*nodes, {"Alive": False, "Resources": {"CPU": 64.0}}]) == shape


def test_a_cluster_too_small_for_the_workers_is_refused():
    nodes = [{"Alive": True, "Resources": {"CPU": 2.0}}]
    with pytest.raises(ValueError, match="cannot hold 3 worker"):
        _worker_shape(RayCluster(workers=3, worker_cpus=1), nodes)
