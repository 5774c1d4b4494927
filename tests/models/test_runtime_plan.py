"""The per-stream runtime plan: the chooser as a pure function of measured costs, ``auto`` reading the saved
calibration, a split pair of tiny models that generates, and the refusal of token ids that disagree."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.catalog import METHODS, method_info
from specsteer.models import calibration as cal
from specsteer.models import loading, planning
from specsteer.models.calibration import RuntimeChoice
from specsteer.models.pair import SplitVocabularyError, assemble_pair
from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS
from specsteer.models.runtime_plan import PROMPT_READER, RuntimePlan, plan_costs, plan_streams
from specsteer.models.tiny import tiny_pair, tiny_tokenizer, write_tiny_gguf
from specsteer.runtimes import llamacpp_build
from specsteer.runtimes import llamacpp_probe as probe
from specsteer.runtimes.base import RUNTIMES, TransformersModel
from testkit import require_llamacpp

USABLE = tuple(RUNTIMES)


def _timing(
    runtime: str, small: tuple[float, float, float], large: tuple[float, float, float], precision: str = "bf16"
) -> cal.RuntimeTiming:
    """Each model's (prompt tok/s, step s, 5-token pass s) on one runtime."""
    return cal.RuntimeTiming(runtime, precision, cal.ModelTiming("small", *small), cal.ModelTiming("large", *large))


def _calibration(*timings: cal.RuntimeTiming, reading: cal.PromptReading | None = None) -> cal.Calibration:
    return cal.Calibration("k", "cpu", DEFAULT_PAIRING, timings, (), 10.0, reading)


# A CPU with AMX (a measured machine's shape, made plainer): bf16 reads prompts 8x faster, 4-bit steps faster,
# the Generalist's most (its steps and passes decide the throughput; the Specialist's prompt the first token).
FAST_READ = ((1600.0, 0.05, 0.06), (640.0, 0.2, 0.25))
FAST_STEP = ((200.0, 0.04, 0.06), (80.0, 0.06, 0.09))
HANDOFF_HEAVY = _calibration(_timing("llama.cpp", *FAST_STEP, "Q4_K_M"), _timing("transformers", *FAST_READ))
# A CPU where bf16 also steps the small model faster than 4-bit (and the large one slower still): nothing of the
# Specialist is left for llama.cpp to do faster, so its pair runs on transformers and the Generalist on llama.cpp.
FAST_READ_AND_STEP = ((1600.0, 0.03, 0.06), (640.0, 0.3, 0.4))
PROMPT_HEAVY = _calibration(_timing("llama.cpp", *FAST_STEP, "Q4_K_M"), _timing("transformers", *FAST_READ_AND_STEP))
# An AVX512-BF16 EPYC: the Specialist reads a long prompt at 449 tok/s in bf16 against llama.cpp's 259 (measured
# there); its steps and the Generalist's are llama.cpp's to win (made up, in that machine's proportions).
AVX512_BF16 = _calibration(
    _timing("llama.cpp", (259.0, 0.030, 0.045), (95.0, 0.075, 0.11), "Q4_K_M"),
    _timing("transformers", (449.0, 0.060, 0.075), (170.0, 0.19, 0.23)),
    reading=cal.PromptReading(512, 259.0, 449.0, "bf16", "fp32 230 tok/s"),
)
# The reverse: llama.cpp reads prompts faster, transformers steps and verifies faster.
DECODE_HEAVY_REVERSED = _calibration(_timing("llama.cpp", *FAST_READ_AND_STEP), _timing("transformers", *FAST_STEP))
# Prompts cheap on both, decoding much cheaper on llama.cpp: nothing to gain from a split.
DECODE_BOUND = _calibration(
    _timing("llama.cpp", (4000.0, 0.02, 0.03), (2000.0, 0.05, 0.07)),
    _timing("transformers", (5000.0, 0.05, 0.06), (2600.0, 0.2, 0.3)),
)


def test_prompt_heavy_costs_put_the_specialist_pair_on_transformers_and_the_generalist_on_llamacpp():
    plan = plan_streams(PROMPT_HEAVY, "specsteer", USABLE)
    assert plan is not None and plan.mixed
    assert (plan.specialist.runtime, plan.generalist.runtime) == ("transformers", "llama.cpp")
    assert plan.runtime == "transformers/llama.cpp"
    # The reason states the measured prompt speeds and the estimates of the plans it beat.
    assert "1600 tok/s" in plan.specialist.reason and "against 200" in plan.specialist.reason
    assert "llama.cpp " in plan.specialist.reason and "transformers " in plan.specialist.reason
    assert "verifies" in plan.generalist.reason
    assert "Specialist and its generic copy on transformers" in plan.reason
    # The split is the cheapest of the four plans, first visible token and end to end both counted.
    costs = plan_costs(PROMPT_HEAVY, "specsteer", USABLE)
    assert (costs[0].specialist, costs[0].generalist) == ("transformers", "llama.cpp")
    split = costs[0]
    fixed = {cost.specialist: cost for cost in costs if not cost.mixed}
    assert split.first_visible_s == pytest.approx(fixed["transformers"].first_visible_s)  # the Specialist's prompt
    assert split.first_visible_s < fixed["llama.cpp"].first_visible_s
    assert split.end_to_end_s < min(cost.end_to_end_s for cost in fixed.values())


def test_the_reverse_costs_give_the_reverse_split():
    plan = plan_streams(DECODE_HEAVY_REVERSED, "specsteer", USABLE)
    assert plan is not None and (plan.specialist.runtime, plan.generalist.runtime) == ("llama.cpp", "transformers")


def test_decode_bound_costs_keep_one_runtime():
    plan = plan_streams(DECODE_BOUND, "specsteer", USABLE)
    assert plan is not None and not plan.mixed and plan.runtime == "llama.cpp"
    assert "first visible + end to end" in plan.reason


def test_a_method_of_one_model_is_never_split_and_follows_its_model():
    for method in METHODS:
        plan = plan_streams(PROMPT_HEAVY, method, USABLE)
        assert plan is not None
        if method_info(method).models != "both":
            assert not plan.mixed, method
    # slm+ reads the private prompt: the faster reader; llm decodes from a short prompt: the faster stepper.
    assert plan_streams(PROMPT_HEAVY, "slm+", USABLE).runtime == "transformers"
    assert plan_streams(PROMPT_HEAVY, "llm", USABLE).runtime == "llama.cpp"


def test_missing_measurements_choose_nothing():
    one = _calibration(PROMPT_HEAVY.timings[0])
    assert plan_streams(one, "specsteer", USABLE) is None
    assert plan_streams(_calibration(), "specsteer", USABLE) is None
    assert plan_streams(PROMPT_HEAVY, "specsteer", ("llama.cpp",)) is None  # transformers unusable here


def test_a_tie_keeps_one_runtime():
    same = _calibration(_timing("llama.cpp", *FAST_STEP), _timing("transformers", *FAST_STEP))
    plan = plan_streams(same, "specsteer", USABLE)
    assert plan is not None and not plan.mixed


def test_where_bf16_reads_faster_and_4bit_steps_faster_llama_cpp_steps_a_prompt_bf16_read():
    """The third choice for the Specialist pair: llama.cpp, its long private prompt read by transformers bf16."""
    plan = plan_streams(HANDOFF_HEAVY, "specsteer", USABLE)
    assert plan is not None and not plan.mixed and plan.runtime == "llama.cpp"
    assert plan.reader == "transformers bf16" and plan.label == "llama.cpp+handoff"
    assert "read by transformers bf16 and handed to llama.cpp (measured here: 1600 against 200" in plan.reason
    costs = {
        (cost.specialist, cost.generalist, cost.reader): cost for cost in plan_costs(HANDOFF_HEAVY, "specsteer", USABLE)
    }
    handed, alone = costs[("llama.cpp", "llama.cpp", "bf16")], costs[("llama.cpp", "llama.cpp", "")]
    split = costs[("transformers", "llama.cpp", "")]
    # The private prompt at bf16's pace, the steps at llama.cpp's: before the split and llama.cpp alone.
    assert handed.first_visible_s < split.first_visible_s < alone.first_visible_s
    assert handed.end_to_end_s < min(split.end_to_end_s, alone.end_to_end_s)
    # The generic copy's short task prompt (under HANDOFF_MIN_TOKENS) is llama.cpp's to read, and costed so.
    assert handed.end_to_end_s - alone.end_to_end_s == pytest.approx(
        cal.PRIVATE_PROMPT_TOKENS / 1600.0 - cal.PRIVATE_PROMPT_TOKENS / 200.0
    )
    # A method that never reads the private prompt has nothing to hand over.
    assert plan_streams(HANDOFF_HEAVY, "llm", USABLE).reader == ""


def test_the_hand_off_is_offered_only_where_the_reading_was_measured_worth_it():
    within = _calibration(*HANDOFF_HEAVY.timings, reading=cal.PromptReading(512, 200.0, 220.0, "bf16"))
    assert not any(cost.reader for cost in plan_costs(within, "specsteer", USABLE))
    assert not any(cost.reader for cost in plan_costs(HANDOFF_HEAVY, "specsteer", ("llama.cpp",)))  # no transformers


def test_the_specialist_pair_is_one_choice():
    """The plan has no separate choice for the generic copy: the Specialist and its copy share a runtime."""
    plan = RuntimePlan(RuntimeChoice("transformers", "a"), RuntimeChoice("llama.cpp", "b"))
    assert set(plan.to_dict()) == {"specialist_pair", "generalist"}
    pair = tiny_pair()
    streams = pair.stream_runtimes()
    assert streams["specialist+"] == streams["specialist0"] == "transformers fp32"


# --------------------------------------------------------------------------- auto, from the saved calibration


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path))
    monkeypatch.delenv(probe.ENV_FORCE, raising=False)
    monkeypatch.setattr(llamacpp_build, "status", lambda models=(): (True, "llama-cpp-python (test)"))
    monkeypatch.setattr(planning, "converted_ready", lambda pairing: True)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    yield tmp_path


def _save(calibration: cal.Calibration) -> None:
    target = cal.calibration_path(DEFAULT_PAIRING)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(calibration.to_json())


def test_without_calibration_auto_keeps_one_runtime_and_says_so(cache):
    pairing = PAIRINGS[DEFAULT_PAIRING]
    plan = planning.runtime_plan(pairing, method="specsteer")
    assert not plan.mixed and plan.runtime == "llama.cpp"
    assert "no calibration; run `specsteer calibrate`" in plan.reason
    # A calibration that timed nothing (a CPU without fast bf16) says why instead.
    _save(cal.Calibration("k", "cpu", DEFAULT_PAIRING, (), ("nothing timed: no fast bf16",), 0.1))
    plan = planning.runtime_plan(pairing, method="specsteer")
    assert plan.runtime == "llama.cpp" and "nothing timed: no fast bf16" in plan.reason


def test_auto_hands_long_prompts_to_llama_cpp_where_the_calibration_measured_transformers_faster(cache):
    """A CPU without fast bf16: the runtimes are not compared whole, only the Specialist's prompt reading."""
    pairing = PAIRINGS[DEFAULT_PAIRING]
    faster = cal.PromptReading(512, llamacpp_tok_s=100.0, transformers_tok_s=150.0)
    _save(cal.Calibration("k", "cpu", DEFAULT_PAIRING, (), ("not compared: no fast bf16",), 0.1, faster))
    assert cal.saved_calibration(DEFAULT_PAIRING).prompt_reading == faster  # read back from its JSON
    plan = planning.runtime_plan(pairing, method="specsteer")
    assert plan.runtime == "llama.cpp" and plan.specialist.prompt_reader == "transformers"
    assert "read by transformers fp32 and handed to llama.cpp (measured here: 150 against 100 tok/s" in plan.reason
    assert plan.to_dict()["specialist_pair"]["prompt_reader"] == "transformers"
    # llama.cpp asked for by name is llama.cpp alone: the benchmarks' comparison.
    assert planning.runtime_plan(pairing, "llama.cpp", method="specsteer").specialist.prompt_reader == ""
    # Within the margin (2 GB more and a copy are not worth 10 %): llama.cpp reads its own prompts.
    close = cal.PromptReading(512, llamacpp_tok_s=100.0, transformers_tok_s=110.0)
    _save(cal.Calibration("k", "cpu", DEFAULT_PAIRING, (), ("not compared: no fast bf16",), 0.1, close))
    plan = planning.runtime_plan(pairing, method="specsteer")
    assert (
        plan.specialist.prompt_reader == "" and "read by llama.cpp (measured here: 110 against 100" not in plan.reason
    )
    assert "prompt_reader" not in plan.to_dict()["specialist_pair"]


def test_given_an_avx512_bf16_calibration_auto_hands_the_prompt_over_from_bf16(cache):
    """Before, the hand-off read only in fp32, so auto ran llama.cpp alone here and the first token waited on its
    reading (259 tok/s); now bf16's 449 tok/s read the private prompt and llama.cpp decodes from there."""
    pairing = PAIRINGS[DEFAULT_PAIRING]
    alone = next(cost for cost in plan_costs(AVX512_BF16, "specsteer", USABLE) if not cost.reader)
    assert (alone.specialist, alone.generalist) == ("llama.cpp", "llama.cpp")  # what auto ran without bf16's reader
    _save(AVX512_BF16)
    plan = planning.runtime_plan(pairing, method="specsteer")
    assert (plan.runtime, plan.reader) == ("llama.cpp", "transformers bf16")
    assert "read by transformers bf16 and handed to llama.cpp (measured here: 449 against 259 tok/s" in plan.reason
    assert plan.to_dict()["specialist_pair"]["prompt_reader_dtype"] == "bf16"
    reader = plan.models(pairing)[-1]
    assert (reader.role, reader.spec, reader.runtime, reader.dtype) == (
        PROMPT_READER,
        pairing.specialist,
        "transformers",
        "bf16",
    )
    assert planning.runtime_plan(pairing, "llama.cpp", method="specsteer").reader == ""  # by name: llama.cpp alone
    # A calibration saved before the reading was timed beside the whole comparison: its 256-token reads decide.
    _save(replace(AVX512_BF16, prompt_reading=None))
    assert planning.runtime_plan(pairing, method="specsteer").reader == "transformers bf16"


def test_a_calibration_saved_before_prompt_reading_was_timed_still_reads(cache):
    old = cal.Calibration("k", "cpu", DEFAULT_PAIRING, (), ("nothing timed",), 0.1)
    text = old.to_json().replace(',\n "prompt_reading": null', "")
    assert "prompt_reading" not in text
    assert cal.Calibration.from_json(text) == old


def test_auto_splits_where_the_calibration_measured_it(cache):
    pairing = PAIRINGS[DEFAULT_PAIRING]
    _save(PROMPT_HEAVY)
    plan = planning.runtime_plan(pairing, method="specsteer")
    assert plan.runtime == "transformers/llama.cpp"
    # where the split's token ids turn out to disagree at load, auto's single-runtime choice loads instead
    assert plan.fallback == RuntimePlan.uniform(planning.runtime_choice(pairing, method="specsteer"))
    assert planning.runtime_plan(pairing, method="llm").runtime == "llama.cpp"
    # Asked for by name: honoured as asked, a split included.
    assert planning.runtime_plan(pairing, "llama.cpp", method="specsteer").runtime == "llama.cpp"
    asked = planning.runtime_plan(pairing, "llama.cpp/transformers", method="specsteer")
    assert asked.fallback is None  # a split asked for by name is refused, never replaced
    assert (asked.specialist.runtime, asked.generalist.runtime) == ("llama.cpp", "transformers")
    with pytest.raises(ValueError, match="two runtimes"):
        planning.runtime_plan(pairing, "auto/llama.cpp")


def test_a_refused_split_falls_back_to_one_runtime(cache, monkeypatch):
    """auto's split whose token ids disagree loads on one runtime, saying why; a split asked for is refused."""
    split = RuntimePlan(RuntimeChoice("transformers", "reads faster"), RuntimeChoice("llama.cpp", "steps faster"))
    fallback = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "today's"))

    def plan(pairing, requested, *args, **kwargs):  # auto's split carries its fallback; one asked for has none
        return replace(split, fallback=fallback) if requested == "auto" else split

    monkeypatch.setattr(loading, "runtime_plan", plan)
    loaded: list[tuple[str, ...]] = []

    def fake_load(pairing, planned, *args, **kwargs):
        runtimes = tuple(model.runtime for model in planned)
        loaded.append(runtimes)
        if len(set(runtimes)) > 1:
            raise SplitVocabularyError("ids disagree")
        return tiny_pair()

    monkeypatch.setattr(loading, "_load_pair_uncached", fake_load)
    loading.clear_loaded_pairs()
    said: list[str] = []
    pair = loading.load_pair(DEFAULT_PAIRING, runtime="auto", progress=said.append)
    assert loaded == [("transformers", "llama.cpp"), ("llama.cpp", "llama.cpp")]
    assert pair.runtime_plan is not None and not pair.runtime_plan.mixed
    assert "a split was refused: ids disagree" in pair.runtime_choice
    assert any("running both models on llama.cpp instead" in line for line in said)
    with pytest.raises(SplitVocabularyError):
        loading.load_pair(DEFAULT_PAIRING, runtime="transformers/llama.cpp")
    loading.clear_loaded_pairs()


def test_an_adapter_loads_only_on_a_plan_made_for_one():
    """Loading decides nothing: an adapter given with a plan made without it is refused, not re-planned."""
    llama = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "measured"))
    with pytest.raises(ValueError, match="a plan made for one"):
        loading.load_planned(PAIRINGS[DEFAULT_PAIRING], llama, specialist_lora=object())  # type: ignore[arg-type]
    assert planning.runtime_plan(PAIRINGS[DEFAULT_PAIRING], "auto", lora=True) == planning.lora_plan("auto")


# --------------------------------------------------------------------------- a split pair of tiny models


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


def _split_pair(gguf_dir):
    require_llamacpp()
    from specsteer.runtimes.llamacpp import LlamaCppModel

    specialist = TransformersModel(write_tiny_gguf(gguf_dir / "small.gguf", 8), "tiny-8")
    write_tiny_gguf(gguf_dir / "large.gguf", 9)
    generalist = LlamaCppModel(gguf_dir / "large.gguf", name="tiny-9", threads=1)
    return assemble_pair("split", specialist, generalist, tiny_tokenizer()), generalist


def test_a_split_pair_generates_and_its_stats_name_both_runtimes(gguf_dir):
    pair, _ = _split_pair(gguf_dir)
    assert pair.runtime == "transformers/llama.cpp" and pair.precision == "fp32 / F32"
    ids = tiny_tokenizer().encode("Rivers carry water to the sea.")
    config = DecodeConfig(method="specsteer", alpha=0.3, max_new_tokens=24)
    _, finished = collect(generate_ids(pair, ids, ids, config))
    stats = finished.stats
    assert finished.token_ids and stats.rounds >= 1 and stats.runtime == "transformers/llama.cpp"
    assert stats.stream_runtimes == {
        "specialist+": "transformers fp32",
        "specialist0": "transformers fp32",
        "generalist": "llama.cpp F32",
    }
    assert stats.to_dict()["stream_runtimes"]["generalist"] == "llama.cpp F32"  # what --json prints
    # The same weights on llama.cpp alone (the same end ids: the GGUF's) give the same tokens: the two
    # runtimes agree within 0.007 on these weights (tests/runtimes/test_runtime.py).
    from specsteer.runtimes.llamacpp import LlamaCppModel

    one = [LlamaCppModel(gguf_dir / f"{name}.gguf", threads=1) for name in ("small", "large")]
    uniform = assemble_pair("one", one[0], one[1], tiny_tokenizer())
    assert uniform.runtime == "llama.cpp"
    assert collect(generate_ids(uniform, ids, ids, config))[1].token_ids == finished.token_ids


def test_a_split_whose_token_ids_disagree_is_refused(gguf_dir, monkeypatch):
    pair, generalist = _split_pair(gguf_dir)
    texts = generalist.token_texts()
    assert texts[: len(tiny_tokenizer())] == tiny_tokenizer().convert_ids_to_tokens(list(range(len(tiny_tokenizer()))))
    swapped = [texts[1], texts[0], *texts[2:]]
    monkeypatch.setattr(generalist, "token_texts", lambda: swapped)
    with pytest.raises(SplitVocabularyError, match="disagree on 2 of 259 ids"):
        assemble_pair("split", pair.specialist, generalist, tiny_tokenizer())
