"""``bench link`` and ``bench project``: their JSON contract, and the projection arithmetic on stored runs."""

from __future__ import annotations

import json

import pytest

from specsteer.cli import bench as bench_cli
from specsteer.data.sources import EXAMPLE_RUNS_DB
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.evaluation.bench_link import link_rows
from specsteer.evaluation.deployment import project_runs
from specsteer.evaluation.deployment_profiles import PROFILES
from specsteer.evaluation.deployment_rows import (
    DEFAULT_RUNS,
    TracedGeneration,
    deployment_rows,
    group_runs,
    projection_rows,
)
from specsteer.method.events import TraceStep
from specsteer.stores.runs import CellResult, GridPoint

ROW_KEYS = {"method", "rtt_ms", "measured_tok_per_s", "projected_tok_per_s", "rounds", "uplink_bytes", "downlink_bytes"}


def traced(pair, method: str, alpha: float | None = None, rtt_ms: float = 0.0) -> TracedGeneration:
    plain = pair.tokenizer.encode("Write about the sea.")
    config = DecodeConfig(method=method, alpha=alpha or 0.1, max_new_tokens=10)
    _, finished = collect(generate_ids(pair, plain, plain, config))
    return TracedGeneration.of(finished.stats, alpha, 1.0 if alpha is not None else None, rtt_ms)


@pytest.mark.slow  # starts a Cloud process
def test_link_and_project_commands(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the child Cloud's arithmetic and share of the machine
    code = bench_cli.main(
        [
            "link",
            "--json",
            "--pairing",
            "tiny-test",
            "--rtt-ms",
            "0,40",
            "--methods",
            "llm,lightcosteer,specsteer",
            "--prompts",
            "1",
            "--max-new-tokens",
            "6",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert {(row["method"], row["rtt_ms"]) for row in result["rows"]} == {
        (method, rtt) for method in ("llm", "lightcosteer", "specsteer") for rtt in (0.0, 40.0)
    }
    for row in result["rows"]:
        assert ROW_KEYS <= set(row) and row["measured_tok_per_s"] > 0 and row["projected_tok_per_s"] > 0
        assert row["uplink_bytes"] > 0 and row["downlink_bytes"] > 0
    by = {(row["method"], row["rtt_ms"]): row for row in result["rows"]}
    assert by[("llm", 40.0)]["rounds"] == 1  # one stream, one round trip
    assert by[("lightcosteer", 40.0)]["rounds"] == by[("lightcosteer", 40.0)]["tokens"]  # one per token
    assert {"cpu", "flags"} <= set(result["machine"])
    assert len(result["runs"]) == 6 and all(run["trace"] for run in result["runs"])
    saved = tmp_path / "bench_link.json"
    saved.write_text(json.dumps(result))
    assert (
        bench_cli.main(["project", "--json", "--profile", "paper", "--from-bench", str(saved), "--rtt-ms", "0,100"])
        == 0
    )
    projected = json.loads(capsys.readouterr().out)
    assert projected["profile"]["name"] == "paper" and projected["generations"] == 3  # the RTT-0 runs
    assert {(row["method"], row["rtt_ms"]) for row in projected["rows"]} == {
        (method, rtt) for method in ("llm", "lightcosteer", "specsteer") for rtt in (0.0, 100.0)
    }
    assert all(ROW_KEYS <= set(row) for row in projected["rows"])
    assert bench_cli.main(["project", "--profile", "paper", "--from-bench", str(saved), "--run", "x"]) == 2
    assert "either" in capsys.readouterr().err
    # No source named: the example runs' traced LongLaMP grid.
    assert bench_cli.main(["project", "--json", "--profile", "paper", "--rtt-ms", "0"]) == 0
    example = json.loads(capsys.readouterr().out)
    assert example["source"] == {"database": str(EXAMPLE_RUNS_DB), "runs": list(DEFAULT_RUNS)}
    assert example["generations"] > 0


def test_the_self_check_is_exact_at_the_rtt_it_was_fitted_on(pair):
    runs = [traced(pair, method) for method in ("llm", "specsteer")]
    rows = link_rows(runs, float("inf"), float("inf"))
    for row in rows:
        assert row["projection_error"] == pytest.approx(0.0, abs=1e-9)
        assert row["prediction_error"] == pytest.approx(0.0, abs=1e-9) and row["lowest_rtt_ms"] == 0.0


def test_link_rows_predict_other_rtts_from_the_lowest(pair):
    base = traced(pair, "specsteer", 0.1)
    # The same generation "measured" at 100 ms: every round trip costs 100 ms more (a made-up run).
    slowed = TracedGeneration(
        **{
            **base.__dict__,
            "rtt_ms": 100.0,
            "seconds": base.seconds + 0.1 * sum(1 for s in base.trace if s.who == "downlink"),
        }
    )
    (low, high) = sorted(link_rows([base, slowed], float("inf"), float("inf")), key=lambda row: row["rtt_ms"])
    assert high["predicted_from_lowest_rtt_tok_per_s"] == pytest.approx(high["measured_tok_per_s"], rel=1e-6)
    assert high["projected_tok_per_s"] < low["projected_tok_per_s"]
    # A run whose link waits do not match the link it claims is caught by its own-profile projection:
    # here 100 ms per round trip were "measured" but no wait was recorded, so the time shows up as host
    # overhead, which the replay charges on top of the 100 ms it adds itself: projected far too slow.
    assert high["projection_error"] < -0.05


def test_projection_rows_and_the_dashboard_function(pair):
    runs = [traced(pair, "llm"), traced(pair, "specsteer", 0.1), traced(pair, "specsteer", 0.5)]
    profile = PROFILES["phone-4g"]
    rows = projection_rows(group_runs(runs), profile, (0.0, 200.0))
    assert len(rows) == 6
    llm = next(row for row in rows if row["method"] == "llm" and row["rtt_ms"] == 200.0)
    assert llm["projected_speedup"] == 1.0 and llm["acceptance"] is None
    specsteer = next(r for r in rows if r["method"] == "specsteer" and r["alpha"] == 0.1 and r["rtt_ms"] == 0.0)
    assert specsteer["projected_tok_per_s"] == pytest.approx(project_runs([runs[1]], profile.at_rtt(0)).tok_per_s)
    assert 0 <= specsteer["token_acceptance"] <= 1
    cells = [CellResult("r1", GridPoint(run.method, run.alpha), "", {}, _stats(pair, run)) for run in runs]
    cells.append(CellResult("r2", GridPoint("llm"), "", {}, _stats(pair, runs[0], trace=[])))  # stored before traces
    assert [row["projected_tok_per_s"] for row in deployment_rows(cells, "phone-4g", (0.0, 200.0))] == pytest.approx(
        [row["projected_tok_per_s"] for row in rows]
    )


def _stats(pair, run: TracedGeneration, trace=None):
    from specsteer.method.events import GenerationStats

    return GenerationStats(
        method=run.method,
        new_tokens=run.new_tokens,
        seconds=run.seconds,
        trace=list(run.trace) if trace is None else trace,
        reused_tokens=dict(run.reused_tokens),
    )


def test_traced_generations_round_trip_through_json(pair):
    run = traced(pair, "specsteer", 0.1, rtt_ms=20.0)
    again = TracedGeneration.from_json(json.loads(json.dumps(run.to_json())))
    assert again == run and isinstance(again.trace[0], TraceStep)
