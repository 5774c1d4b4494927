"""``--acceptance`` and ``--cda-lambda`` on the command line: generate sends CDA in its Open and says so in its
stats, refuses it where it has nothing to adapt; bench speed runs a case per rule, labelled."""

from __future__ import annotations

import json

from specsteer.cli import bench
from specsteer.evaluation.bench_plan import bench_cases
from specsteer.evaluation.bench_report import format_table
from testkit import generate_cli


def _generate(capsys, *extra):
    return generate_cli(capsys, "--max-new-tokens", "8", *extra)


def test_generate_sends_cda_in_its_open_and_reports_it(capsys):
    code, out, _ = _generate(capsys, "--json", "--acceptance", "cda", "--cda-lambda", "2")
    assert code == 0
    document = json.loads(out)
    opening = document["transcript"][0]["payload"]
    assert (opening["kind"], opening["rule"], opening["acceptance"], opening["cda_lambda"]) == (
        "open",
        "ratio",
        "cda",
        2.0,
    )
    assert document["stats"]["cda_lambda"] == 2.0
    code, out, _ = _generate(capsys, "--json")  # the default: the fixed α, and nothing about it on the wire
    assert code == 0 and "cda_lambda" not in json.loads(out)["transcript"][0]["payload"]


def test_generate_refuses_cda_where_there_is_no_alpha(capsys):
    code, _, err = _generate(capsys, "--acceptance", "cda", "--method", "llm")
    assert code == 2 and "CDA adapts SpecSteer's α" in err
    code, _, err = _generate(capsys, "--acceptance", "cda", "--sample", "--exact")
    assert code == 2 and "exclude each other" in err


def test_bench_speed_runs_a_case_per_acceptance_rule(capsys):
    cases = bench_cases(["llm", "specsteer"], [0.1], ["4"], 8, acceptance=[None, 1.0])
    assert [(c.config.method, c.config.cda_lambda) for c in cases] == [
        ("llm", None),
        ("specsteer", None),
        ("specsteer", 1.0),
    ]
    tiny = ["--pairing", "tiny-test", "--prompts", "1", "--max-new-tokens", "4", "--draft-len", "2"]
    quick = ["--runtime", "transformers", "--no-reference", "--no-prefix-reuse", "--json"]
    rules = ["--acceptance", "fixed,cda", "--cda-lambda", "0.5"]
    assert bench.main(["speed", *tiny, *quick, *rules, "--methods", "llm,specsteer"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = [(row["method"], row["cda_lambda"]) for row in result["rows"]]
    assert rows == [("llm", None), ("specsteer", None), ("specsteer", 0.5)]
    assert "specsteer a=0.1 b=1 cda=0.5 k=2" in format_table(result)
