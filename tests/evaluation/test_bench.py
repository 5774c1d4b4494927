"""The speed benchmark's arithmetic and its JSON shape (tiny models: numbers mean nothing here)."""

from __future__ import annotations

import json
import math

import pytest

from specsteer.cli import bench as bench_cli
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.draft_length import DraftLength
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, prepare
from specsteer.evaluation import bench, bench_plan
from specsteer.method.costs import speculative_bound
from specsteer.method.decoding import ForwardLog
from specsteer.method.events import GenerationStats
from specsteer.models.tiny import tiny_pair


def test_bound_matches_design_worked_example():
    # DESIGN §6: a = 0.82, k = 4, t_S = 66 ms, t_L = 180 ms, t_S0 = 70 ms.
    # 0.82^5 = 0.37074, so E = (1 - 0.37074) / 0.18 = 3.4959; T = 4 * 0.066 + 0.180 + 0.070 = 0.514 s.
    assert speculative_bound(0.82, 4, 0.066, 0.180, 0.070) == pytest.approx(3.4959 / 0.514, rel=1e-4)
    assert speculative_bound(1.0, 3, 0.1, 0.2, 0.0) == pytest.approx(4 / 0.5)
    # Charged for the steered bonus's extra device step in every round: T = 5 * 0.066 + 0.25.
    assert speculative_bound(0.82, 4, 0.066, 0.180, 0.070, device_steps=5) == pytest.approx(3.4959 / 0.58, rel=1e-4)


def _log(draft: float, large: float, generic: float, sizes: tuple[int, ...] = (2, 9)) -> ForwardLog:
    """Passes that cost the same whatever their tokens (a transformers pass over a few tokens)."""
    log = ForwardLog()
    for name, seconds in (("specialist+", draft), ("generalist", large), ("specialist0", generic)):
        log.record(name, 1.0, tokens=300)  # prefill, excluded from step times
        for tokens in sizes if name != "specialist+" else (1,):
            log.record(name, seconds, tokens)
    return log


def test_adaptive_draft_length_follows_the_bound():
    choose = DraftLength(maximum=8, adaptive=True).choose
    cheap_drafts = _log(0.01, 0.2, 0.05)
    costly_drafts = _log(0.15, 0.2, 0.05)
    confident = GenerationStats(method="specsteer", accepted=95, verified=100)
    doubtful = GenerationStats(method="specsteer", accepted=40, verified=100)
    assert choose(confident, cheap_drafts) == 8
    assert choose(doubtful, costly_drafts) == 1
    k = choose(GenerationStats(method="specsteer", accepted=82, verified=100), _log(0.066, 0.18, 0.07))
    assert k == max(range(1, 9), key=lambda n: speculative_bound(0.82, n, 0.066, 0.18, 0.07))
    # Until there is data, and when fixed, the maximum is used.
    assert choose(GenerationStats(method="specsteer"), costly_drafts) == 8
    assert DraftLength(4, adaptive=False).choose(doubtful, costly_drafts) == 4


def test_adaptive_draft_length_learns_how_a_pass_grows_with_its_tokens():
    choose = DraftLength(maximum=16, adaptive=True).choose
    confident = GenerationStats(method="specsteer", accepted=99, verified=100)
    # Every verification so far read 17 tokens: the growth is unknown, so a shorter round is probed.
    assert choose(confident, _log(0.03, 0.2, 0.1, sizes=(17, 17))) == 8
    # Passes that grow with their tokens (llama.cpp on a CPU): 60 ms + 50 ms per token for the Generalist.
    growing = ForwardLog()
    growing.record("specialist+", 1.0, tokens=300)
    growing.record("specialist+", 0.03)
    for name, fixed, per_token in (("generalist", 0.06, 0.05), ("specialist0", 0.02, 0.02)):
        growing.record(name, 1.0, tokens=300)
        for tokens in (3, 9, 17):
            growing.record(name, fixed + per_token * tokens, tokens)
    expected = max(
        range(1, 17), key=lambda k: speculative_bound(0.99, k, 0.03, 0.06 + 0.05 * (k + 1), 0.02 + 0.02 * (k + 1))
    )
    assert choose(confident, growing) == expected < 16
    assert choose(confident, _log(0.03, 0.2, 0.1)) == 16  # flat passes: the longest draft wins


def test_adaptive_generation_keeps_the_greedy_output():
    """k changes only the speed: with alpha = 0 the output is still SLM+'s, token for token."""
    pair = tiny_pair()
    prepared = prepare(Request(task="free", input_text="Write about the sea."))
    _, reference = collect(generate(pair, prepared, DecodeConfig(method="slm+", max_new_tokens=30)))
    _, adaptive = collect(
        generate(
            pair,
            prepared,
            DecodeConfig(
                method="specsteer", alpha=0.0, bonus=False, adaptive_draft=True, draft_len=6, max_new_tokens=30
            ),
        )
    )
    assert adaptive.token_ids == reference.token_ids
    assert adaptive.stats.verified == adaptive.stats.accepted == 30


def test_draft_length_specs():
    specs = ["4", "auto", "12@0.4", "auto@0.3", "auto:12", "auto:6@0.4"]
    cases = bench_plan.bench_cases(["sd"], [0.1], specs, max_new_tokens=8)
    assert [(c.config.draft_len, c.config.adaptive_draft, c.config.draft_confidence) for c in cases] == [
        (4, False, 0.0),
        (bench_plan.MAX_AUTO_DRAFT, True, 0.0),
        (12, False, 0.4),
        (bench_plan.MAX_AUTO_DRAFT, True, 0.3),
        (12, True, 0.0),
        (6, True, 0.4),
    ]
    assert [bench_plan.draft_label(c.config) for c in cases] == specs
    with pytest.raises(ValueError, match="draft confidence"):
        bench_plan.bench_cases(["sd"], [0.1], ["4@1.5"], max_new_tokens=8)


def test_speed_report_shape_on_tiny_models():
    pair = tiny_pair(generalist_vocab=320)  # transformers' assisted generation wants equal vocab sizes
    prompts = [prepare(Request(task="free", input_text=f"Topic {i}: rivers.")) for i in range(2)]
    cases = bench_plan.bench_cases(["llm", "specsteer", "sd-plain"], [0.5], ["3", "auto"], max_new_tokens=6)
    assert [(c.name, c.config.adaptive_draft) for c in cases] == [
        ("llm", False),
        ("specsteer", False),
        ("specsteer", True),
        ("sd-plain", False),
        ("sd-plain", True),
    ]
    plain = cases[-1].prompts_for(prompts[0]).prompts
    assert plain.private == plain.plain == prompts[0].prompts.plain
    result = json.loads(json.dumps(bench.run_speed([pair], prompts, cases, reference=True)))
    rows = {(r["method"], r["draft_len"]): r for r in result["rows"]}
    assert rows[("llm", None)]["speedup"] == pytest.approx(1.0)
    assert rows[("llm", None)]["decode_speedup"] == pytest.approx(1.0)
    specsteer_decode = rows[("specsteer", "3")]["decode_tok_per_s"] / rows[("llm", None)]["decode_tok_per_s"]
    assert rows[("specsteer", "3")]["decode_speedup"] == pytest.approx(specsteer_decode)
    for key in ("method", "alpha", "beta", "tok_per_s", "speedup", "acceptance", "bound_tok_per_s"):
        assert all(key in r for r in result["rows"])
    assert rows[("llm", None)]["bound_tok_per_s"] is None
    specsteer = rows[("specsteer", "3")]
    assert specsteer["bound_tok_per_s"] > 0
    assert specsteer["device_bound_tok_per_s"] > 0
    # Forward seconds per wall second: two sides may compute at once (the Cloud reads ahead), never more.
    assert all(0 < r["forward_share"] <= 2 for r in result["rows"])
    assert all(r["runtime"] == "transformers" and r["ttft_s"] > 0 for r in result["rows"])
    assert result["machine"]["cpu"] and result["machine"]["threads"] >= 1
    assert result["reference"]["method"] == "transformers-assisted"
    assert math.isfinite(result["reference"]["speedup"])


def test_speed_on_the_tiny_cross_pair_runs_what_it_can_and_refuses_the_rest(capsys):
    """``bench speed --pairing tiny-cross-test``: the methods a cross pair runs, with transformers' universal
    assisted generation (both tokenizers) as the reference; a method it cannot run is refused before timing."""
    from specsteer.engine.generate import collect as run_to_end
    from specsteer.models.tiny import CROSS_PAIRING_ID, shared_test_pair

    base = [
        "speed",
        "--pairing",
        CROSS_PAIRING_ID,
        "--prompts",
        "1",
        "--max-new-tokens",
        "4",
        "--draft-len",
        "3",
        "--no-prefix-reuse",
        "--json",
    ]
    assert bench_cli.main([*base, "--methods", "llm,llm+,specsteer"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [row["method"] for row in result["rows"]] == ["llm", "llm+", "specsteer"]
    assert result["reference"]["method"] == "transformers-assisted"
    pair = shared_test_pair(CROSS_PAIRING_ID)
    prepared = prepare(Request(task="free", input_text="Rivers."))
    _, llm = run_to_end(generate(pair, prepared, DecodeConfig(method="llm", max_new_tokens=6)))
    tokens, _ = bench.transformers_assisted(pair, prepared, 6)  # both tokenizers given: greedy, as long as llm
    assert tokens == llm.stats.new_tokens
    assert bench_cli.main([*base, "--methods", "specsteer,sd"]) == 2
    assert "Standard SD is not available on a cross-tokenizer pairing" in capsys.readouterr().err
