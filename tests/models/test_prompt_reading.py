"""Who reads the Specialist's long prompt: bf16 proven in a child process (a crash named, never the caller's),
never assumed from the CPU's flags; fp32 where bf16 is slower, crashed or computed other logits."""

from __future__ import annotations

import sys

import pytest

from specsteer.models import calibration as cal
from specsteer.models import prompt_reading as reading
from specsteer.models.prompt_reading import Bf16Outcome, bf16_outcome, bf16_reading, pick_reader
from specsteer.models.registry import DEFAULT_PAIRING

# The tiny model's shapes as a GGUF declares them (what the calibration reads from llama.cpp).
TINY_SHAPE = {
    "general.architecture": "qwen2",
    "qwen2.embedding_length": "64",
    "qwen2.feed_forward_length": "128",
    "qwen2.block_count": "2",
    "qwen2.attention.head_count": "4",
    "qwen2.attention.head_count_kv": "2",
    "qwen2.context_length": "4096",
    "qwen2.attention.layer_norm_rms_epsilon": "1e-6",
    "n_vocab": "320",
}


def test_bf16_reads_where_it_ran_agreed_and_was_faster_and_fp32_elsewhere():
    faster = pick_reader(512, 259.0, 230.0, Bf16Outcome(449.0, "449 tok/s"))
    assert (faster.dtype, faster.transformers_tok_s, faster.handoff) == ("bf16", 449.0, True)
    assert "read by transformers bf16 and handed to llama.cpp (measured here: 449 against 259" in faster.reason()
    assert "fp32 230 tok/s" in faster.reason()
    slower = pick_reader(512, 100.0, 157.0, Bf16Outcome(58.0, "58 tok/s, not faster than fp32's 157"))
    assert (slower.dtype, slower.transformers_tok_s) == ("fp32", 157.0) and "bf16 58 tok/s" in slower.reason()
    crashed = pick_reader(512, 100.0, 157.0, Bf16Outcome(None, "crashed with SIGILL in a child process"))
    assert crashed.dtype == "fp32" and "bf16 crashed with SIGILL" in crashed.reason()


def test_the_childs_report_is_judged_agreement_first_then_the_whole_prompt():
    assert bf16_outcome({"tok_s": 449.0, "tokens": 512, "cosine": 0.9999}, 512, 230.0).tok_s == 449.0
    unlike = bf16_outcome({"tok_s": 900.0, "tokens": 512, "cosine": 0.2}, 512, 230.0)
    assert unlike.tok_s is None and "unlike fp32's" in unlike.detail
    assert bf16_outcome({"tok_s": 900.0, "tokens": 512, "cosine": float("nan")}, 512, 230.0).tok_s is None
    stopped = bf16_outcome({"tok_s": 40.0, "tokens": 64, "cosine": 0.9999}, 512, 230.0)
    assert stopped.tok_s is None and "over 64 tokens, under half fp32's 230: stopped" in stopped.detail


@pytest.mark.slow  # a child process
def test_bf16_runs_in_a_child_process_and_agrees_with_fp32():
    """The real child on the tiny model's shapes: bf16 computes on any x86 CPU (slowly without AVX512-BF16)."""
    outcome = bf16_reading(TINY_SHAPE, tokens=96, fp32_tok_s=1e-3)
    assert outcome.tok_s is not None and outcome.tok_s > 0, outcome.detail
    assert "faster than fp32's 0, proven in a child process" in outcome.detail


def test_the_child_stops_after_its_short_read_where_bf16_is_under_the_floor():
    from specsteer.models.bf16_reading_child import read_in_bf16

    stopped = read_in_bf16(TINY_SHAPE, tokens=96, probe_tokens=16, floor_tok_s=1e12)
    assert stopped["tokens"] == 16 and stopped["cosine"] > reading.BF16_AGREEMENT
    whole = read_in_bf16(TINY_SHAPE, tokens=96, probe_tokens=16, floor_tok_s=0.0)
    assert whole["tokens"] == 96 and whole["tok_s"] > 0


def test_a_crashing_bf16_kernel_is_named_and_fp32_reads(monkeypatch):
    crash = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    monkeypatch.setattr(reading, "child_command", lambda: crash)
    outcome = bf16_reading(TINY_SHAPE, tokens=32, fp32_tok_s=100.0)
    assert outcome == Bf16Outcome(None, "crashed with SIGSEGV in a child process")
    monkeypatch.setattr(reading, "child_command", lambda: [sys.executable, "-c", "raise SystemExit('no bf16 here')"])
    assert "failed in a child process: no bf16 here" in bf16_reading(TINY_SHAPE, 32, 100.0).detail


@pytest.mark.parametrize("proven", ["bf16", "fp32"])
def test_the_runtimes_are_compared_whole_only_where_bf16_was_proven_fast(tmp_path, monkeypatch, proven):
    """The CPU's flags say fast bf16 either way here; only the child's proof decides."""
    from specsteer.runtimes import hardware, llamacpp_build

    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path))
    monkeypatch.setattr(hardware, "default_dtype", lambda: "bf16")
    monkeypatch.setattr(llamacpp_build, "status", lambda models=(): (True, "llama.cpp (test)"))
    alternative = "fp32 230 tok/s" if proven == "bf16" else "bf16 crashed with SIGILL in a child process"
    measured = cal.PromptReading(512, 259.0, 449.0 if proven == "bf16" else 230.0, proven, alternative)
    monkeypatch.setattr(reading, "measure_prompt_reading", lambda pairing, say: measured)
    timing = cal.RuntimeTiming("x", "x", cal.ModelTiming("s", 1.0, 1.0, 1.0), cal.ModelTiming("g", 1.0, 1.0, 1.0))
    monkeypatch.setattr(cal, "_llamacpp_timing", lambda pairing: (timing, [{}, {}]))
    compared: list[str] = []
    monkeypatch.setattr(cal, "_transformers_timing", lambda pairing, dtype, shapes: compared.append(dtype) or timing)
    result = cal.calibrate(DEFAULT_PAIRING, say=lambda line: None)
    assert result.prompt_reading == measured
    if proven == "bf16":
        assert compared == ["bf16"] and len(result.timings) == 2 and not result.skipped
    else:
        assert compared == [] and result.timings == ()
        assert "bf16 is not fast here (bf16 crashed with SIGILL in a child process)" in result.skipped[0]
