"""Which runtime runs here: llama.cpp proven in a child process before it is used, and ``auto`` choosing
from this machine's measured costs.

A native crash must never take the caller down: the probe's child processes are made to crash here
(SIGSEGV, as llama.cpp's AMX kernels do on some Xeons) and the probe must name it and go on to the next
configuration. The choice itself is a pure function of measured costs, tested on made-up costs with a
known answer.
"""

from __future__ import annotations

import json
import sys

import pytest

from specsteer.evaluation.bench_report import auto_rows
from specsteer.models import calibration as cal
from specsteer.models.model_timing import random_twin, time_model
from specsteer.models.planning import runtime_choice, runtime_plan
from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS
from specsteer.models.tiny import tiny_model, write_tiny_gguf
from specsteer.models.weights import ModelLoadError
from specsteer.runtimes import llamacpp_build, llamacpp_child
from specsteer.runtimes import llamacpp_probe as probe
from specsteer.runtimes.base import TransformersModel
from specsteer.runtimes.machine import machine_info
from testkit import require_llamacpp


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh SpecSteer cache: no saved proof, no calibration; the decision is made again."""
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path))
    monkeypatch.delenv(probe.ENV_FORCE, raising=False)
    probe.forget()
    yield tmp_path
    probe.forget()


def _crashing_child(crash_for: set[str]):
    """A child command that dies of SIGSEGV for the named configurations and passes for the others."""

    def command(config, paths):
        if config.name in crash_for:
            return [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
        return [sys.executable, "-c", "print('{\"worst\": 0.1, \"buffers\": [\"CPU\"]}')"]

    return command


def test_a_crashing_configuration_is_named_and_the_next_one_is_tried(cache, monkeypatch):
    monkeypatch.setattr(probe, "child_command", _crashing_child({"repack"}))
    report = probe.run_probe([cache / "model.gguf"], say=lambda line: None)
    first, second = report.outcomes
    assert (first.config, first.passed) == ("repack", False)
    assert "SIGSEGV" in first.detail and "crashed" in first.detail
    assert (second.config, second.passed) == ("plain", True)
    assert report.chosen is not None and report.chosen.name == "plain"
    assert probe.saved_report() == report  # kept for this CPU and build


def test_no_working_configuration_makes_llamacpp_unavailable_and_auto_falls_back(cache, monkeypatch):
    monkeypatch.setattr(probe, "child_command", _crashing_child({"repack", "plain"}))
    report = probe.run_probe([cache / "model.gguf"], say=lambda line: None)
    assert report.chosen is None and "no configuration passed" in report.describe()
    probe.forget()
    try:
        llamacpp_build.bindings()
    except llamacpp_build.LlamaCppUnavailable:
        pytest.skip("llama-cpp-python is not built here: its availability has another reason")
    usable, reason = llamacpp_build.status()
    assert not usable and "SIGSEGV" in reason
    pairing = PAIRINGS[DEFAULT_PAIRING]
    assert runtime_plan(pairing, "auto", lambda line: None).runtime == "transformers"
    with pytest.raises(ModelLoadError, match="failed its check"):
        runtime_plan(pairing, "llama.cpp")


def test_a_child_that_reports_an_error_is_a_failure_with_its_last_line(cache, monkeypatch):
    monkeypatch.setattr(
        probe,
        "child_command",
        lambda config, paths: [
            sys.executable,
            "-c",
            "import sys; print('loading…', file=sys.stderr); sys.exit('llama_decode returned -3')",
        ],
    )
    outcome = probe.run_config(probe.CONFIGURATIONS[0], [])
    assert not outcome.passed and "llama_decode returned -3" in outcome.detail


def test_a_hung_child_is_stopped_at_its_time_limit(cache, monkeypatch):
    monkeypatch.setattr(
        probe, "child_command", lambda config, paths: [sys.executable, "-c", "import time; time.sleep(30)"]
    )
    outcome = probe.run_config(probe.CONFIGURATIONS[0], [], timeout=1)
    assert not outcome.passed and "no answer within 1 s" in outcome.detail


def test_a_forced_configuration_skips_the_probe(cache, monkeypatch):
    monkeypatch.setenv(probe.ENV_FORCE, "plain")
    monkeypatch.setattr(probe, "run_probe", lambda *a, **k: pytest.fail("the probe ran"))
    config, why = probe.proven_configuration()
    assert config.name == "plain" and probe.ENV_FORCE in why
    with pytest.raises(ValueError, match="unknown llama.cpp configuration"):
        probe.config_named("amx")


def test_the_report_round_trips_through_json():
    report = probe.ProbeReport(
        "key",
        "cpu",
        ("a.gguf",),
        (probe.ProbeOutcome("repack", False, "crashed", 1.0), probe.ProbeOutcome("plain", True, "ok", 2.0, ("CPU",))),
    )
    assert probe.ProbeReport.from_json(report.to_json()) == report
    assert report.chosen.name == "plain"


@pytest.mark.parametrize("config", probe.CONFIGURATIONS, ids=lambda c: c.name)
def test_the_decode_path_passes_on_a_real_gguf_in_every_configuration(tmp_path, config):
    require_llamacpp()
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, seed=3)
    worst, buffers = llamacpp_child.exercise(path, config)
    assert 0.0 <= worst <= probe.AGREEMENT
    assert "CPU" in buffers  # llama.cpp's load log was read


@pytest.mark.slow  # a child process
def test_the_child_process_runs_the_decode_path(tmp_path):
    require_llamacpp()
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, seed=3)
    outcome = probe.run_config(probe.CONFIGURATIONS[-1], [path])
    assert outcome.passed, outcome.detail
    assert "5-token pass" in outcome.detail


# --------------------------------------------------------------------------- calibration and auto


def _timing(runtime, prompt_tok_s, step_s, verify_s):
    small = cal.ModelTiming("small", prompt_tok_s * 3, step_s / 3, verify_s / 3)
    large = cal.ModelTiming("large", prompt_tok_s, step_s, verify_s)
    return cal.RuntimeTiming(runtime, "x", small, large)


# Decoding bound by bandwidth (4-bit llama.cpp steps 3x faster), prompts by compute (bf16 reads 8x faster):
# the AMX machine's shape. SpecSteer's three prompts (825 + 180 + 180 tokens) then outweigh its decoding.
LLAMA = _timing("llama.cpp", prompt_tok_s=30.0, step_s=0.08, verify_s=0.2)
TORCH = _timing("transformers", prompt_tok_s=240.0, step_s=0.24, verify_s=0.26)
MEASURED = cal.Calibration("k", "cpu", DEFAULT_PAIRING, (LLAMA, TORCH), (), 10.0)


def test_auto_picks_per_method_from_measured_costs():
    usable = ("llama.cpp", "transformers")
    assert cal.choose(MEASURED, "llm", usable).runtime == "llama.cpp"
    picked = cal.choose(MEASURED, "specsteer", usable)
    assert picked.runtime == "transformers"
    assert "specsteer" in picked.reason and "llama.cpp" in picked.reason  # both estimates are stated
    assert cal.estimate(TORCH, "specsteer") < cal.estimate(LLAMA, "specsteer")
    assert cal.choose(MEASURED, "specsteer", ("llama.cpp",)).runtime == "llama.cpp"  # only what works here
    assert cal.choose(MEASURED, "specsteer", ()) is None


def test_the_estimate_charges_what_each_method_reads_and_decodes():
    large = LLAMA.generalist
    assert cal.estimate(LLAMA, "llm") == pytest.approx(
        cal.PLAIN_PROMPT_TOKENS / large.prompt_tok_s + cal.NEW_TOKENS * large.step_s
    )
    assert cal.estimate(LLAMA, "slm+") > cal.estimate(LLAMA, "slm")  # the private prompt is longer
    # A speculative method decodes at the DESIGN §6 bound: faster than the large model's steps here.
    prompts = cal.estimate(LLAMA, "specsteer") - cal.NEW_TOKENS / cal._speculative_bound(LLAMA.specialist, large)
    assert prompts == pytest.approx(
        cal.PRIVATE_PROMPT_TOKENS / LLAMA.specialist.prompt_tok_s
        + cal.PLAIN_PROMPT_TOKENS / large.prompt_tok_s
        + cal.PLAIN_PROMPT_TOKENS / LLAMA.specialist.prompt_tok_s
    )


def test_auto_uses_the_saved_calibration(cache, monkeypatch):
    monkeypatch.setattr(llamacpp_build, "status", lambda models=(): (True, "llama-cpp-python (test)"))
    monkeypatch.setattr("specsteer.models.planning.converted_ready", lambda pairing: True)
    pairing = PAIRINGS[DEFAULT_PAIRING]
    assert runtime_choice(pairing, method="specsteer").runtime == "llama.cpp"  # nothing measured yet
    target = cal.calibration_path(DEFAULT_PAIRING)
    target.parent.mkdir(parents=True)
    target.write_text(MEASURED.to_json())
    assert cal.saved_calibration(DEFAULT_PAIRING) == MEASURED
    choice = runtime_choice(pairing, method="specsteer")
    assert choice.runtime == "transformers" and "estimated fastest" in choice.reason
    assert runtime_choice(pairing, method="llm").runtime == "llama.cpp"
    assert runtime_choice(pairing, "llama.cpp", method="specsteer").runtime == "llama.cpp"  # asked for: honoured


def test_time_model_measures_a_real_runtime():
    timing = time_model(TransformersModel(tiny_model(1), "tiny"), "tiny")
    assert timing.prompt_tok_s > 0 and timing.step_s > 0 and timing.verify_s > 0


def test_the_twin_for_timing_has_the_gguf_shapes(tmp_path):
    require_llamacpp()
    import torch

    from specsteer.runtimes.llamacpp import LlamaCppModel

    write_tiny_gguf(tmp_path / "tiny.gguf", seed=2)
    model = LlamaCppModel(tmp_path / "tiny.gguf", threads=1)
    metadata = {**model.metadata(), "n_vocab": str(model.output_rows)}
    model.close()
    twin = random_twin(metadata, torch.float32)
    reference = tiny_model(2).config
    for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"):
        assert getattr(twin.config, name) == getattr(reference, name), name
    logits = twin(torch.tensor([[1, 2, 3]])).logits
    assert torch.isfinite(logits).all()


def test_the_auto_rows_are_the_measured_rows_of_the_picked_runtime():
    rows = [
        {"runtime": "llama.cpp", "method": "llm", "tok_per_s": 9.0},
        {"runtime": "transformers", "method": "llm", "tok_per_s": 5.0},
        {"runtime": "llama.cpp", "method": "specsteer", "tok_per_s": 6.0},
        {"runtime": "transformers", "method": "specsteer", "tok_per_s": 7.0},
    ]
    auto = auto_rows(rows, {"llm": "llama.cpp", "specsteer": "transformers"})
    assert [(r["method"], r["auto_picked"], r["tok_per_s"]) for r in auto] == [
        ("llm", "llama.cpp", 9.0),
        ("specsteer", "transformers", 7.0),
    ]
    assert all(r["runtime"] == "auto" for r in auto)


def test_the_machine_record_says_whether_amx_is_present():
    info = machine_info()
    assert info.amx == any(flag.startswith("amx") for flag in info.flags)
    assert json.dumps(info.to_dict())  # serialisable into every benchmark's JSON


def test_one_cpuinfo_reader_serves_the_wheel_key_and_the_machine_record():
    from specsteer.runtimes.hardware import cpu_model_and_flags, read_cpu

    text = (
        "processor\t: 0\nmodel name\t: Intel Xeon Platinum 8480+\nflags\t\t: fpu avx2 amx_bf16 amx_tile avx512_bf16\n\n"
        "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n"
    )
    model, flags = read_cpu(text)
    assert model == "Intel Xeon Platinum 8480+" and {"amx_tile", "fpu"} <= flags and "other" not in model
    assert cpu_model_and_flags(text) == (model, ("avx2", "avx512_bf16", "amx_bf16"))
