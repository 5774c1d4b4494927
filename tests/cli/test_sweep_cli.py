"""`specsteer sweep` on tiny-test evaluate runs (finished and partial), and what `specsteer evaluate` adds for
a sweep: the privacy shares in a CoGenesis run's --json rows, the claim with its intervals, the α × β plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import storage
from specsteer.cli import evaluate as evaluate_cli
from specsteer.cli import sweep as sweep_cli
from specsteer.evaluation import grid
from specsteer.evaluation.claims import VERDICT_TEXT
from specsteer.service import evaluation_runs

GRID = ["--methods", "slm+,llm,specsteer", "--alpha", "1,0.1", "--beta", "1", "--pairing", "tiny-test"]
FAST = ["--max-new-tokens", "3", "--retrieval-k", "1"]
PROFILE = "Name: Ada Park\nPrivacy_info: Takes cello lessons every Tuesday; Is saving money for a shop in Lisbon"


pytestmark = pytest.mark.usefixtures("evaluate_on_tiny")


def evaluate(url: str, name: str, *extra: str, data: str = "sample", task: str = "review") -> int:
    arguments = ["--data", data, "--task", task, *GRID, *FAST, "--database", url, "--run-name", name, *extra]
    return evaluate_cli.main(arguments)


def test_sweep_reads_a_partial_run_then_the_finished_one(url, capsys):
    # Shard 0 of 2 runs records 0 and 2 of the sample's 3: the run is not finished.
    assert evaluate(url, "part", "--limit", "3", "--shard", "0/2") == 0
    capsys.readouterr()
    assert sweep_cli.main(["--run-name", "part", "--database", url, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "running"
    assert (document["records_complete"], document["records_seen"], document["grid_points"]) == (2, 3, 4)
    assert [(row["method"], row["alpha"]) for row in document["rows"]] == [
        ("specsteer", 1.0),
        ("specsteer", 0.1),
        ("slm+", None),
        ("llm", None),
    ]
    assert all(row["records"] == 2 for row in document["rows"])
    assert document["choice"]["alpha"] in (1.0, 0.1) and document["choice"]["statement"].startswith("chosen:")
    steered = [row for row in document["rows"] if row["method"] == "specsteer"]
    assert all(row["diff_vs_llm_low"] <= row["diff_vs_llm"] <= row["diff_vs_llm_high"] for row in steered)
    # The other shard finishes it; the table now covers all three records.
    assert evaluate(url, "part", "--limit", "3", "--shard", "1/2") == 0
    capsys.readouterr()
    plot = Path(url.removeprefix("sqlite:///")).parent / "sweep.html"
    assert sweep_cli.main(["--run-name", "part", "--database", url, "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 records have every cell of the run's 4 grid points" in out and "chosen: α=" in out
    assert "Pareto front" in plot.read_text(encoding="utf-8")


def test_sweep_refuses_what_is_not_there_without_creating_a_database(tmp_path, url, capsys):
    missing = tmp_path / "nothing.db"
    assert sweep_cli.main(["--run-name", "x", "--database", f"sqlite:///{missing}"]) == 2
    assert "no database file" in capsys.readouterr().err and not missing.exists()
    assert evaluate(url, "one", "--limit", "1") == 0
    capsys.readouterr()
    assert sweep_cli.main(["--run-name", "other", "--database", url]) == 2
    assert "no run named 'other'" in capsys.readouterr().err


def test_evaluate_states_the_claim_with_intervals_and_plots_the_alpha_beta_view(url, tmp_path, capsys):
    plot = tmp_path / "run.html"
    assert evaluate(url, "claims", "--limit", "2", "--plot", str(plot)) == 0
    out = capsys.readouterr().out
    assert "SpecSteer − SLM+ on R-L, each setting on the records both have" in out
    claims = [line for line in out.splitlines() if line.startswith("SpecSteer α=")]
    assert len(claims) == 4  # two settings, each against SLM+ and against LLM
    assert all(" [" in line and "/2 better, 95 % bootstrap)" in line for line in claims)
    assert all(line.endswith(tuple(f"{text}." for text in VERDICT_TEXT.values())) for line in claims)
    page = plot.read_text(encoding="utf-8")
    assert "Pareto front" in page and "SpecSteer − LLM" in page


def cogenesis_file(tmp_path: Path) -> str:
    records = [
        {
            "tid": tid,
            "conversations": [{"from": "user", "value": task}, {"from": "assistant", "value": "Spring is here."}],
            "profile": [{"title": "Tulips", "text": "Tulips open wide in a warm room.", "id": 0}],
            "additional_profile": PROFILE,
            "additional_tasks": [],
        }
        for tid, task in (("1", "Write a note to customers about bouquets."), ("2", "Tell my customers about peonies."))
    ]
    path = tmp_path / "cogenesis_tiny.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return str(path)


def test_cogenesis_json_rows_carry_the_privacy_shares_the_dashboard_shows(url, tmp_path, capsys, monkeypatch):
    data = cogenesis_file(tmp_path)
    assert evaluate(url, "cogenesis", "--prompt-style", "clean", "--json", data=data, task="cogenesis") == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)["rows"]
    expected = grid.JSON_ROW_KEYS + grid.PRIVACY_ROW_KEYS + grid.CROSSING_ROW_KEYS  # every cell audited
    assert [tuple(row) for row in rows] == [expected] * len(rows)
    # The same function gives the Dashboard's rows of the stored run: the same shares.
    monkeypatch.setenv("DATABASE_URL", url)
    run = storage.get_run_by_name("cogenesis", url=url)
    shown = evaluation_runs.stored_rows(run.config, storage.run_cells(run.id, url=url))
    for row, dashboard in zip(rows, shown, strict=True):
        assert (row["method"], row["alpha"]) == (dashboard["method"], dashboard["alpha"])
        assert all(row[key] == dashboard[key] and 0 <= row[key] <= 1 for key in grid.PRIVACY_ROW_KEYS)
    # --json keeps stdout one document; the claim goes to stderr.
    assert "SpecSteer − LLM on R-L" in captured.err
