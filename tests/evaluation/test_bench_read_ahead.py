"""``bench speed --read-ahead``: every read-ahead policy a case of the same run, its rows carrying it (tiny
models: the numbers mean nothing here, only the shape)."""

from __future__ import annotations

import json

import pytest

from specsteer.cli import bench as bench_cli
from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD
from specsteer.evaluation import bench_report
from specsteer.models.tiny import TEST_PAIRING_ID

BASE = [
    "speed",
    *("--pairing", TEST_PAIRING_ID, "--methods", "llm,specsteer", "--prompts", "1", "--max-new-tokens", "4"),
    *("--draft-len", "3", "--no-reference", "--no-prefix-reuse", "--json"),
]


def test_each_policy_is_a_case_of_the_run_with_its_own_llm_reference(capsys):
    assert bench_cli.main([*BASE, "--read-ahead", "off,after-first-draft"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["read_ahead"] == ["off", "after-first-draft"]
    assert [(row["method"], row["read_ahead"]) for row in result["rows"]] == [
        ("llm", "off"),
        ("specsteer", "off"),
        ("llm", "after-first-draft"),
        ("specsteer", "after-first-draft"),
    ]
    for row in result["rows"]:
        assert row["first_visible_s"] > 0 and row["ttft_s"] > 0
        if row["method"] == "llm":
            assert row["speedup"] == pytest.approx(1.0)
    # the same tokens under each policy
    assert len({row["tokens"] for row in result["rows"] if row["method"] == "specsteer"}) == 1
    table = bench_report.format_table(result)
    assert "after-first-draft" in table and " off " in table


def test_the_default_policy_alone_and_no_read_ahead_is_off(capsys):
    assert bench_cli.main(BASE) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["read_ahead"] == DEFAULT_READ_AHEAD
    assert {row["read_ahead"] for row in result["rows"]} == {DEFAULT_READ_AHEAD}
    assert bench_cli.main([*BASE, "--no-read-ahead"]) == 0
    assert json.loads(capsys.readouterr().out)["read_ahead"] == "off"


def test_an_unknown_policy_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_cli.main([*BASE, "--read-ahead", "concurrent,soon"])
    assert exit_.value.code == 2
    assert "read-ahead must be one of off, concurrent, after-first-draft, not 'soon'" in capsys.readouterr().err
