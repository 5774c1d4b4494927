"""CDA as a grid dimension on the tiny pair: `evaluate --acceptance fixed,cda --cda-lambda L` stores both rules'
cells under their own keys, in the run's config and in each cell's point (read back from the SQL store), resumes,
and every reader (`--json` rows, the table, `sweep`, `report`, the claims) names the rule: "CDA λ=1"."""

from __future__ import annotations

import json

import pytest

import storage
from specsteer.cli import evaluate as evaluate_cli
from specsteer.cli import report as report_cli
from specsteer.cli import sweep as sweep_cli
from specsteer.evaluation import plots, result_table
from specsteer.evaluation.deployment_rows import deployment_rows
from specsteer.evaluation.grid import EvalSpec, grid_points, run_config, spec_from_config
from specsteer.stores.runs import GridPoint, cell_key

GRID = ["--methods", "slm+,llm,specsteer", "--alpha", "1", "--beta", "1", "--pairing", "tiny-test"]
FAST = ["--max-new-tokens", "3", "--retrieval-k", "1", "--limit", "2", "--data", "sample", "--task", "review"]
FIXED, CDA = GridPoint("specsteer", 1.0, 1.0), GridPoint("specsteer", 1.0, 1.0, 1.0)


pytestmark = pytest.mark.usefixtures("evaluate_on_tiny")


def evaluate(url: str, name: str, *extra: str) -> int:
    return evaluate_cli.main([*FAST, *GRID, "--database", url, "--run-name", name, *extra])


def test_the_acceptance_rule_is_a_grid_dimension_of_specsteer_alone():
    points = grid_points(("slm+", "llm", "specsteer"), (1.0, 0.1), (1.0,), acceptance=(None, 1.0, 2.0))
    assert [p for p in points if p.method != "specsteer"] == [GridPoint("slm+"), GridPoint("llm")]
    assert [(p.alpha, p.cda_lambda) for p in points if p.method == "specsteer"] == [
        (1.0, None),
        (0.1, None),
        (1.0, 1.0),
        (0.1, 1.0),
        (1.0, 2.0),
        (0.1, 2.0),
    ]
    # The fixed α's keys are the ones stored before CDA existed: old runs resume; CDA's are their own.
    assert cell_key("r1", FIXED) == "r1|specsteer|a=1|b=1"
    assert cell_key("r1", CDA) == "r1|specsteer|a=1|b=1|cda=1"
    assert (FIXED.display, CDA.display, CDA.setting) == (
        "SpecSteer α=1 β=1",
        "SpecSteer α=1 β=1 CDA λ=1",
        "α=1 β=1 CDA λ=1",
    )


def test_a_fixed_runs_config_is_the_one_stored_before_cda():
    spec = EvalSpec(data="sample.jsonl", task="review")
    config = run_config(spec, "tiny-test", "transformers", None, 1)
    assert "acceptance" not in config and "cda_lambdas" not in config
    cda = run_config(EvalSpec(data="s.jsonl", task="review", acceptance="cda", cda_lambdas=(2.0,)), "t", "t", None, 1)
    assert (cda["acceptance"], cda["cda_lambdas"]) == ("cda", (2.0,))
    assert spec_from_config(json.loads(json.dumps(cda))).acceptance_rules() == [2.0]


def test_bad_acceptance_settings_are_refused():
    with pytest.raises(ValueError, match="acceptance must be one of"):
        EvalSpec(data="s", task="review", acceptance="adaptive").validate()
    with pytest.raises(ValueError, match="finite number >= 0"):
        EvalSpec(data="s", task="review", methods=("specsteer",), acceptance="cda", cda_lambdas=(-1.0,)).validate()


def test_a_run_under_both_rules_stores_reads_back_and_names_them(url, capsys):
    assert evaluate(url, "both", "--acceptance", "fixed,cda", "--cda-lambda", "1", "--json") == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["method"], r["cda_lambda"]) for r in rows] == [
        ("slm+", None),
        ("llm", None),
        *[("specsteer", x) for x in (None, 1.0)],
    ]
    run = storage.get_run_by_name("both", url=url)
    assert (run.config["acceptance"], run.config["cda_lambdas"]) == ("fixed,cda", [1.0])
    cells = storage.run_cells(run.id, url=url)
    assert {cell.point for cell in cells} == {GridPoint("slm+"), GridPoint("llm"), FIXED, CDA}
    assert all(cell.stats.cda_lambda == cell.point.cda_lambda for cell in cells)
    # The deployment view projects the two rules at one (α, β) apart, each row named by its rule.
    projected = deployment_rows(cells, "paper", rtts_ms=(0.0,))
    steered = [row for row in projected if row["method"] == "specsteer"]
    assert sorted((row["cda_lambda"] is not None, row["runs"]) for row in steered) == [(False, 2), (True, 2)]
    assert {plots.point_label(row) for row in steered} == {FIXED.display, CDA.display}
    assert spec_from_config(run.config).points() == [GridPoint("slm+"), GridPoint("llm"), FIXED, CDA]
    assert evaluate(url, "both", "--acceptance", "fixed,cda", "--cda-lambda", "1") == 0  # resumed: nothing to do
    assert "0 cells computed" in capsys.readouterr().err
    # Another λ is another config: refused under the same name, not mixed in.
    assert evaluate(url, "both", "--acceptance", "fixed,cda", "--cda-lambda", "2") == 2

    assert sweep_cli.main(["--run-name", "both", "--database", url]) == 0
    table = capsys.readouterr().out
    assert "SpecSteer α=1 β=1 CDA λ=1" in table and "SpecSteer α=1 β=1 " in table
    assert sweep_cli.main(["--run-name", "both", "--database", url, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [row["cda_lambda"] for row in document["rows"] if row["method"] == "specsteer"] == [None, 1.0]
    assert "cda_lambda" in document["choice"] and len(document["choice"]["near_ties"][0]) == 3


def test_a_cda_run_joins_a_fixed_run_over_the_same_records(url, capsys):
    """The plan's test table: the CDA cells of one run beside another run's fixed α, SLM+ and LLM."""
    assert evaluate(url, "fixed") == 0
    assert (
        evaluate_cli.main(
            [*FAST, *GRID[:1], "specsteer", *GRID[2:], "--database", url, "--run-name", "cda", "--acceptance", "cda"]
        )
        == 0
    )
    capsys.readouterr()
    assert report_cli.main(["--run", "fixed", "--run", "cda", "--database", url]) == 0
    out = capsys.readouterr().out
    assert "SpecSteer α=1 β=1 CDA λ=1 − SpecSteer α=1 β=1:" in out
    assert "differ in acceptance" not in out  # the rule is a point's, not a difference between the runs


def test_the_figures_and_the_table_keep_the_rules_apart():
    rows = [
        {"method": "specsteer", "alpha": alpha, "beta": 1.0, "cda_lambda": rule, "acceptance": 0.5}
        for rule in (None, 1.0)
        for alpha in (0.1, 1.0)
    ]
    names = [trace.name for trace in plots.acceptance_figure(rows).data]
    assert names == ["SpecSteer β=1", "SpecSteer β=1 CDA λ=1"]  # one line per rule, each over both α
    assert [list(trace.x) for trace in plots.acceptance_figure(rows).data] == [[0.1, 1.0], [0.1, 1.0]]
    assert [row["CDA λ"] for row in result_table.display_rows(rows)] == ["–", "–", "1", "1"]
    assert "CDA λ" not in result_table.display_rows(rows[:2])[0]  # a run without CDA keeps its columns
    assert plots.point_label(rows[2]) == "SpecSteer α=0.1 β=1 CDA λ=1"
