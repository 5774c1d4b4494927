"""The α × β sweep and docs/research/SWEEP_PLAN.md's choice rule on synthetic cells whose answer is known."""

from __future__ import annotations

import random

import pytest

from specsteer.evaluation import plots
from specsteer.evaluation.grid import paired_difference
from specsteer.evaluation.metrics import bootstrap_interval
from specsteer.evaluation.sweep import choose, complete_records, pareto_front, report_json, report_table, sweep_report
from specsteer.method.events import GenerationStats
from specsteer.stores.runs import CellResult, GridPoint

LLM, SLM_PLUS = GridPoint("llm"), GridPoint("slm+")


def setting(alpha: float, beta: float) -> GridPoint:
    return GridPoint("specsteer", alpha, beta)


def cell(record: str, point: GridPoint, rouge_l: float, tokens: int = 10, seconds: float = 1.0) -> CellResult:
    """A cell with ROUGE-L ``rouge_l`` on the 0-100 scale and ``tokens`` new tokens in ``seconds``."""
    scores = {"rouge1": rouge_l / 100, "rougeL": rouge_l / 100, "rouge1_stemmed": None, "rougeL_stemmed": None}
    return CellResult(
        record, point, "text", scores, GenerationStats(method=point.method, new_tokens=tokens, seconds=seconds)
    )


def run_cells(records: int = 5) -> list[CellResult]:
    """LLM at 20 + i, SLM+ at 18 + i (fastest); A = LLM + 2 (5 tok/s), B = LLM + 1.95 (8 tok/s: a near-tie,
    faster), C = LLM − 1 (4.5 tok/s); one more record has only its LLM cell (a partial run)."""
    cells = []
    for index in range(records):
        record = f"r{index}"
        base = 20.0 + index
        cells += [
            cell(record, LLM, base, 10, 2.0),
            cell(record, SLM_PLUS, base - 2, 20, 1.0),
            cell(record, setting(1, 1), base + 2, 10, 2.0),
            cell(record, setting(0.1, 1), base + 1.95, 8, 1.0),
            cell(record, setting(0.1, 2), base - 1, 9, 2.0),
        ]
    return cells + [cell("r99", LLM, 50.0)]


GRID = [SLM_PLUS, LLM, setting(1, 1), setting(0.1, 1), setting(0.1, 2)]


def test_the_bootstrap_is_the_one_paired_difference_always_used():
    # The interval before it was shared: the same draws, so the numbers stated in earlier reports stand.
    values = [random.Random(i).uniform(-5, 5) for i in range(30)]
    rng = random.Random(0)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(10_000))
    assert bootstrap_interval(values) == (means[250], means[9749])
    with pytest.raises(ValueError, match="at least one"):
        bootstrap_interval([])


def test_only_records_with_every_cell_are_used_and_the_report_says_how_many():
    cells = run_cells()
    assert complete_records(cells) == ["r0", "r1", "r2", "r3", "r4"]
    report = sweep_report(cells, GRID)
    assert (report.records_seen, report.records_complete) == (6, 5)
    assert "5 of 6 records have every cell" in report.coverage()
    assert all(summary.records == 5 for summary in [*report.settings, *report.references])
    # A grid point of the run with no cell yet leaves no record complete: nothing is compared.
    empty = sweep_report(cells, [*GRID, setting(0.05, 1)])
    assert empty.records_complete == 0 and empty.settings == () and empty.choice is None


def test_each_setting_has_its_mean_interval_speed_and_difference_from_llm():
    report = sweep_report(run_cells(), GRID)
    by_point = {summary.point: summary for summary in report.settings}
    a = by_point[setting(1, 1)]
    assert a.mean == pytest.approx(24.0) and a.tok_per_s == pytest.approx(5.0)
    assert a.low <= a.mean <= a.high and a.low < a.high  # the records differ: a real interval
    assert a.vs_reference is not None and a.vs_reference.mean == pytest.approx(2.0)
    # The difference is the same on every record, so every resample gives it.
    assert (a.vs_reference.low, a.vs_reference.high) == pytest.approx((2.0, 2.0))
    assert a.vs_reference.wins == 5 and a.vs_reference.records == 5
    assert by_point[setting(0.1, 2)].vs_reference.mean == pytest.approx(-1.0)
    expected = paired_difference(run_cells()[:-1], setting(1, 1), LLM)
    assert a.vs_reference == expected
    assert [summary.point for summary in report.references] == [SLM_PLUS, LLM]


def test_a_near_tie_goes_to_the_faster_setting():
    report = sweep_report(run_cells(), GRID)
    choice = report.choice
    assert choice is not None
    assert choice.best == setting(1, 1) and choice.best_mean == pytest.approx(2.0)
    assert set(choice.near_ties) == {setting(1, 1), setting(0.1, 1)}
    assert choice.chosen == setting(0.1, 1)  # 1.95 lies within 0.10 of 2.0 and runs at 8 tok/s, not 5
    assert choice.any_positive
    assert "fastest of 2 settings within 0.1 R-L" in choice.statement()


def test_the_choice_rule_exactly_as_written():
    a, b, c = setting(1, 1), setting(0.3, 1), setting(0.1, 1)
    # Largest mean wins when nothing lies within 0.10 of it, however fast the others are.
    assert choose([(a, 1.0, 1.0), (b, 0.8, 100.0)]).chosen == a
    # 0.10 exactly is within; 0.11 is not.
    assert choose([(a, 1.0, 1.0), (b, 0.9, 2.0)]).chosen == b
    assert choose([(a, 1.0, 1.0), (b, 0.89, 2.0)]).chosen == a
    # Among several near-ties, the fastest; one outside the margin never counts, even the fastest.
    chosen = choose([(a, 0.5, 3.0), (b, 0.45, 4.0), (c, 0.2, 50.0)])
    assert chosen.chosen == b and chosen.near_ties == (a, b)
    # A setting without a speed is the slowest.
    assert choose([(a, 0.5, None), (b, 0.45, 1.0)]).chosen == b
    assert choose([]) is None


def test_no_positive_gain_still_chooses_by_rule_two_and_says_so():
    a, b, c = setting(1, 1), setting(0.3, 1), setting(0.1, 1)
    choice = choose([(a, -0.5, 10.0), (b, -0.2, 4.0), (c, -0.15, 6.0)])
    assert choice is not None and not choice.any_positive
    assert choice.best == c and choice.chosen == c  # b is within 0.10 of -0.15 but slower
    assert "showed no gain over LLM" in choice.statement()
    # Zero is not a gain.
    assert not choose([(a, 0.0, 1.0)]).any_positive


def test_the_pareto_front_keeps_what_nothing_beats_on_both_axes():
    points = [(20.0, 5.0), (21.0, 4.0), (19.0, 4.5), (20.0, 5.0), (18.0, 9.0), (17.0, None)]
    # (19, 4.5) is beaten by (20, 5); equal points both stay; a point without a speed is left out.
    assert pareto_front(points) == [0, 1, 3, 4]
    report = sweep_report(run_cells(), GRID)
    # SLM+ is the fastest, A the best: both on the front; C (slower and worse than A) is not.
    assert SLM_PLUS in report.pareto and setting(1, 1) in report.pareto and setting(0.1, 2) not in report.pareto


def test_the_report_as_json_and_table():
    report = sweep_report(run_cells(), GRID)
    document = report_json(report)
    assert document["records_complete"] == 5 and document["records_seen"] == 6 and document["grid_points"] == 5
    assert document["bootstrap"] == {"draws": 10_000, "seed": 0, "level": 0.95}
    assert (document["choice"]["alpha"], document["choice"]["beta"]) == (0.1, 1.0)
    assert sum(row["chosen"] for row in document["rows"]) == 1
    llm = next(row for row in document["rows"] if row["method"] == "llm")
    assert llm["diff_vs_llm"] is None and llm["rougeL"] == pytest.approx(22.0)
    table = report_table(report)
    assert table.startswith("5 of 6 records") and "chosen: α=0.1 β=1" in table and "+2.00 [+2.00, +2.00]" in table


def test_without_llm_there_is_no_choice_and_the_table_says_why():
    cells = [c for c in run_cells() if c.point != LLM]
    report = sweep_report(cells, [p for p in GRID if p != LLM])
    assert report.choice is None and all(s.vs_reference is None for s in report.settings)
    assert "no LLM cells" in report_table(report)
    figure = plots.sweep_figure(report)
    assert len({trace.yaxis for trace in figure.data}) == 1  # no difference panel without LLM


def test_the_alpha_beta_figure_has_error_bars_references_and_the_front():
    report = sweep_report(run_cells(), GRID)
    figure = plots.sweep_figure(report)
    names = [trace.name for trace in figure.data]
    assert "SpecSteer (α, β)" in names and "Pareto front" in names and "SpecSteer − LLM" in names
    assert "SLM+ (reference)" in names and "LLM (reference)" in names
    steered = figure.data[names.index("SpecSteer (α, β)")]
    assert len(steered.x) == 3 and steered.error_y.array is not None and steered.error_y.arrayminus is not None
    difference = figure.data[names.index("SpecSteer − LLM")]
    assert list(difference.y) == pytest.approx([2.0, 1.95, -1.0])
    assert list(difference.marker.symbol) == ["circle", "diamond", "circle"]  # the chosen setting
    front = figure.data[names.index("Pareto front")]
    assert list(front.x) == sorted(front.x)
    assert "5 of 6 records" in figure.layout.title.text
