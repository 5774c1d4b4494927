"""``specsteer generate --method p3``: the JSON document shows the rounds, the Edge's corrections and what crossed."""

from __future__ import annotations

import json
from pathlib import Path

from testkit import generate_cli

SAMPLE = Path(__file__).resolve().parents[2] / "assets" / "samples" / "persona_software_developer.json"


def _generate(capsys, *extra):
    return generate_cli(capsys, "--method", "p3", "--max-new-tokens", "12", *extra)


def test_generate_p3_json_shows_tokens_rounds_and_the_transcript(capsys):
    code, out, _ = _generate(capsys, "--json", "--p3-draft-len", "3", "--p3-tau", "0.01")
    assert code == 0
    document = json.loads(out)
    stats = document["stats"]
    assert stats["method"] == "p3" and stats["new_tokens"] == 12 and stats["rounds"] >= 4  # k = 3
    assert stats["device_chosen"] == sum(t["kind"] == "recovered" for t in document["tokens"])
    transcript = document["transcript"]
    assert transcript[0]["payload"]["kind"] == "open" and transcript[0]["payload"]["rule"] == "cloud-draft"
    assert transcript[0]["payload"]["top_k"] == 3
    assert {m["payload"]["kind"] for m in transcript[1:]} == {"draft", "tokens"}
    sent = [t for m in transcript if m["payload"]["kind"] == "draft" for t in m["payload"]["append"]]
    emitted = [t["id"] for t in document["tokens"] if t["kind"] != "rejected"]
    assert sent == emitted[: len(sent)] and len(sent) < len(emitted)  # the last round's tokens never cross
    assert "".join(t["text"] for t in document["tokens"] if t["kind"] != "rejected") == document["text"]


def test_out_of_range_p3_settings_exit_2(capsys):
    code, _, err = _generate(capsys, "--p3-tau", "1.5")
    assert code == 2 and "tau" in err


def test_the_terminal_stats_line_names_the_share_chosen_on_the_device(capsys):
    code, out, _ = _generate(capsys, "--no-color", "--p3-draft-len", "3", "--p3-tau", "0.01")
    assert code == 0
    assert "[p3] 12 tokens" in out and "chosen on the device " in out and "/12 (" in out


def test_evaluate_and_bench_take_p3s_settings():
    from specsteer.cli import evaluate
    from specsteer.evaluation.bench_plan import bench_cases
    from specsteer.evaluation.grid import decode_config, run_config
    from specsteer.method.p3 import P3Params
    from specsteer.stores.runs import GridPoint

    data = ["--data", str(SAMPLE.parent / "longlamp_sample_review.jsonl"), "--task", "review"]
    args = evaluate.build_parser().parse_args([*data, "--methods", "p3", "--p3-draft-len", "4"])
    args.p3_tau = 0.2
    spec = evaluate.spec_from_args(args)
    assert decode_config(GridPoint("p3", None, None), spec).p3 == P3Params(4, 0.2)
    assert run_config(spec, "tiny-test", "transformers", None, 1)["p3_tau"] == 0.2
    default = evaluate.spec_from_args(evaluate.build_parser().parse_args(data))
    assert "p3_tau" not in run_config(default, "tiny-test", "transformers", None, 1)  # older runs still resume
    (case,) = bench_cases(["p3"], [0.1], ["4"], 8, P3Params(2, 0.5))
    assert case.config.p3 == P3Params(2, 0.5)
