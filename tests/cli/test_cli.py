"""``python -m specsteer generate``: the JSON contract, the coloured output and the error exits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specsteer import cli
from specsteer.models.tiny import tiny_pair
from testkit import force_drafts, generate_cli

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "samples" / "review_user.jsonl"


@pytest.fixture
def tiny_models(monkeypatch):
    pair = tiny_pair()
    monkeypatch.setattr("specsteer.models.loading.load_pair", lambda *args, **kwargs: pair)
    return pair


def generate(capsys, *extra):
    code = cli.main(
        [
            "generate",
            "--history",
            str(SAMPLE),
            "--task",
            "review",
            "--input",
            "Write a review of wireless earbuds.",
            "--max-new-tokens",
            "12",
            *extra,
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_contract(tiny_models, capsys):
    code, out, _ = generate(capsys, "--json", "--alpha", "0.5")
    assert code == 0
    document = json.loads(out)
    assert set(document) == {"text", "tokens", "history_crossed", "stats", "transcript"}
    assert document["history_crossed"]["linked"] and document["history_crossed"]["guard"] == 0
    assert all(set(t) == {"id", "text", "kind"} for t in document["tokens"])
    assert "".join(t["text"] for t in document["tokens"] if t["kind"] != "rejected") == document["text"]
    stats = document["stats"]
    for key in (
        "new_tokens",
        "seconds",
        "tok_per_s",
        "rounds",
        "drafted",
        "accepted",
        "acceptance_rate",
        "forward_calls",
        "uplink_bytes",
        "downlink_bytes",
    ):
        assert key in stats
    assert stats["uplink_bytes"] == sum(m["bytes"] for m in document["transcript"] if m["direction"] == "uplink")
    assert all(set(m) == {"direction", "bytes", "payload"} for m in document["transcript"])
    assert document["transcript"][0]["payload"]["kind"] == "open"


def test_the_json_names_the_history_that_crossed(tiny_models, capsys, monkeypatch):
    force_drafts(monkeypatch, b"hour flight and ")  # words of the sample history (its first review), one round
    code, out, _ = generate(capsys, "--json", "--alpha", "0", "--draft-len", "16", "--max-new-tokens", "20")
    crossed = json.loads(out)["history_crossed"]
    assert code == 0 and crossed["count"] == 1 and crossed["phrases"][0]["text"] == "hour flight and"
    (where,) = crossed["phrases"][0]["crossings"]
    assert (where["round"], where["part"]) == (1, "accepted")
    assert where["spans"] == [{"message": 1, "field": "draft", "start": 0, "end": 15}]
    code, out, _ = generate(capsys, "--alpha", "1.0", "--private-guard", "3")
    assert "[history crossed]" in out and "guard was on (n = 3 tokens)" in out


def test_infinite_alpha_is_valid_json(tiny_models, capsys):
    code, out, _ = generate(capsys, "--json", "--alpha", "inf")
    assert code == 0 and "Infinity" not in out
    assert json.loads(out)["stats"]["accepted"] == 0


def test_coloured_text_and_stats_line(tiny_models, capsys):
    code, out, _ = generate(capsys, "--alpha", "1.0")
    assert code == 0
    assert "\033[" in out  # tokens are coloured by kind
    assert "tok/s" in out and "acceptance" in out and "uplink" in out


def test_no_colour(tiny_models, capsys):
    code, out, _ = generate(capsys, "--no-color", "--method", "llm")
    assert code == 0 and "\033[" not in out


@pytest.mark.parametrize("content, message", [("", "empty"), ("{not json", "JSON")])
def test_bad_history_exits_2_with_a_message(tmp_path, capsys, content, message):
    bad = tmp_path / "history.json"
    bad.write_text(content)
    code = cli.main(["generate", "--history", str(bad), "--task", "free", "--input", "x"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error:") and message.lower() in err.lower()


def test_missing_history_file(capsys):
    code = cli.main(["generate", "--history", "/nonexistent/file.json", "--task", "free", "--input", "x"])
    assert code == 2 and "not found" in capsys.readouterr().err


def test_unknown_pairing_lists_the_valid_ones(capsys):
    code, _, err = generate(capsys, "--pairing", "no-such-pair")
    assert code == 2 and "offline-qwen2.5-coder" in err


def test_hub_model_offline_fails_fast_naming_the_offline_pair(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = generate(capsys, "--pairing", "qwen3-0.6b__qwen3-1.7b")
    assert code == 1 and "offline-qwen2.5-coder" in err


@pytest.mark.slow  # a child process
def test_module_entry_point_prints_help():
    result = subprocess.run([sys.executable, "-m", "specsteer", "generate", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--draft-len" in result.stdout


@pytest.mark.slow  # a child process
def test_a_deeply_nested_history_is_a_named_error_not_a_traceback(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000)
    done = subprocess.run(
        [sys.executable, "-m", "specsteer", "generate", "--history", str(deep), "--task", "review", "--input", "x"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: line 1: the JSON is nested more than"), done.stderr
    assert "Traceback" not in done.stderr


def test_generate_reads_the_prompt_style_the_app_defaults_to(capsys):
    """``--prompt-style clean`` (the app's persona default) reaches the prompts: the plain prompt the Cloud is
    opened with differs from the paper templates' (so a command line can reproduce what the app generated)."""

    def opened_prompt(style: str) -> list[int]:
        code, out, err = generate_cli(capsys, "--max-new-tokens", "2", "--prompt-style", style, "--json")
        assert code == 0, err
        uplink = [m for m in json.loads(out)["transcript"] if m["direction"] == "uplink"]
        return uplink[0]["payload"]["prompt"]

    assert opened_prompt("clean") != opened_prompt("paper")
    with pytest.raises(SystemExit) as refused:
        generate_cli(capsys, "--prompt-style", "fancy")
    assert refused.value.code == 2 and "invalid choice" in capsys.readouterr().err
