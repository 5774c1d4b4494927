"""The engine benchmark's CPU dry run (benchmarks/engine_bench.py --dry-run): the whole benchmark on tiny shapes of
the paper's families, through the real engine, in seconds. Its numbers are not figures; what is checked is what a
GPU run will write: every run's tokens and time split, the scripted and replayed acceptance, the JSON after each."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.dry_run, pytest.mark.slow]  # the benchmark's CPU dry run: a child process


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("engine_bench", ROOT / "benchmarks" / "engine_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["engine_bench"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def result(bench, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "engine_bench.json"
    assert bench.main(["--dry-run", "--pairs", "qwen3", "--out", str(out), "--budget-s", "120"]) == 0
    return json.loads(out.read_text())


def test_every_run_is_there_in_order(result):
    assert result["schema"] == "specsteer.engine_bench/1" and result["dry_run"] and result["finished"]
    assert "real engine" in result["execution"] and "no link" in result["execution"]
    assert [row["run"] for row in result["runs"]] == [
        "llm",
        "specsteer@0.6",
        "specsteer@replay",
        "specsteer@0.3",
        "specsteer@0.9",
    ]
    assert result["complete"] and not result["skipped"]
    assert result["pairs"][0]["small"] == "Qwen3-0.6B" and result["pairs"][0]["large"] == "Qwen3-32B"


def test_each_run_reads_its_whole_prompts_and_writes_its_tokens(result):
    settings = result["settings"]
    for row in result["runs"]:
        assert row["tokens"] == settings["tokens"] and row["tok_per_s"] > 0
        assert all(count == 0 for count in row["reused_tokens"].values())  # fresh prompts, no cache hit
        passes = row["passes"]
        assert passes["link_s"] == 0  # in process
        assert passes["cloud_s"] > 0 and (passes["edge_s"] > 0) == (row["method"] == "specsteer")


def test_the_rounds_split_their_time_and_keep_what_was_scripted(result):
    replay = json.loads((ROOT / "benchmarks" / "engine_bench_trace.json").read_text())["rounds"]
    k = result["settings"]["draft_len"]
    for row in result["runs"]:
        if row["method"] != "specsteer":
            assert row["round_split"] is None
            continue
        split = row["round_split"]["sum_s"]  # the rounds after the first: no prompt read beside them
        assert split["seconds"] == pytest.approx(split["edge_s"] + split["cloud_s"] + split["host_s"] + split["link_s"])
        assert split["host_s"] > 0 and split["edge_s"] > 0 and split["cloud_s"] > 0
        assert split["seconds"] + row["first_round_s"] + row["before_rounds_s"] == pytest.approx(row["seconds"])
        assert row["before_rounds_s"] >= 0
        for drafted, accepted, *_ in row["round_log"]:
            assert 0 <= accepted <= drafted <= k
        if row["run"] == "specsteer@replay":
            kept = [accepted for _, accepted, *_ in row["round_log"]]
            assert kept == [min(a, d) for (_, a), (d, *_) in zip(replay, row["round_log"])]
        assert "scripted" in row["acceptance"] or "replayed" in row["acceptance"]


def test_the_table_names_every_run(bench, result):
    table = bench.markdown_table(result)
    assert "DRY RUN" in table
    assert all(row["run"] in table for row in result["runs"])


def test_gpu_profile_sets_the_projection_beside_each_run(result, gpu_costs_dry_run, tmp_path, capsys):
    from specsteer.cli import gpu_profile as gpu_profile_cli
    from specsteer.evaluation.deployment import NO_HOST_OVERHEAD
    from specsteer.evaluation.gpu_engine_bench import bench_comparison, one_gpu_profile, parse_engine_bench
    from specsteer.evaluation.gpu_profile import load_costs

    bench_file = tmp_path / "bench.json"
    bench_file.write_text(json.dumps(result))
    costs = str(gpu_costs_dry_run[0])
    argv = [costs, "--no-projection", "--engine-bench", str(bench_file), "--json"]
    assert gpu_profile_cli.main(argv) == 0
    shown = json.loads(capsys.readouterr().out)["engine_bench"]
    assert shown["dry_run"] and [row["run"] for row in shown["rows"]] == [row["run"] for row in result["runs"]]
    for row, run in zip(shown["rows"], result["runs"]):
        assert row["measured_tok_per_s"] == pytest.approx(run["tokens"] / run["seconds"])
        assert row["projected_s"] > 0 and row["gap_s"] == pytest.approx(row["measured_s"] - row["projected_s"])
    # The projection prices the very trace each run kept: a run with fewer passes is projected faster.
    profile = one_gpu_profile(load_costs(costs), "qwen3")
    assert profile.edge_host == profile.cloud_host == NO_HOST_OVERHEAD and profile.link.rtt_ms == 0
    rows = bench_comparison(parse_engine_bench(result), profile, "qwen3")
    by_run = {row["run"]: row for row in rows}
    assert by_run["specsteer@0.9"]["projected_s"] < by_run["specsteer@0.3"]["projected_s"]
    with pytest.raises(ValueError, match="engine benchmark"):
        parse_engine_bench({"schema": "something else"})
