"""The application service without any GUI: settings, the generation / comparison / evaluation workflows
as typed events, saving through the store protocol (an in-memory store here), and every failure as a
message."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

import storage
from specsteer import service as service_module
from specsteer.data import bundled_sample_path, sample_history_path
from specsteer.engine import Request, chat_ids, prepare
from specsteer.evaluate import EvalResult, EvalSpec, GridProgress
from specsteer.generationstore import NamedHistory, NewComparison, NewGeneration
from specsteer.history import parse_history
from specsteer.methods import METHOD_INFO
from specsteer.service import (
    AppService,
    ComparisonSaved,
    ComparisonStarted,
    Done,
    Failed,
    Generating,
    Loading,
    OutputDone,
    PairCatalog,
    Started,
    Status,
    Stopped,
    Token,
)
from specsteer.settings import GenerationSettings, SettingsError
from specsteer.testing import TEST_PAIRING_ID, shared_tiny_pair

INPUT = "Write a review of a power bank with great battery life"


class MemoryStore:
    """A GenerationStore in lists: the service must need nothing but the protocol."""

    def __init__(self, fail: bool = False) -> None:
        self.histories: list[NamedHistory] = []
        self.generations: list[NewGeneration] = []
        self.comparisons: list[NewComparison] = []
        self.fail = fail

    def save_history(self, history):
        if self.fail:
            raise OSError("disk full")
        if history not in self.histories:
            self.histories.append(history)
        return self.histories.index(history) + 1

    def save_generation(self, generation):
        self.generations.append(generation)
        return len(self.generations)

    def save_comparison(self, comparison):
        self.comparisons.append(comparison)
        return len(self.comparisons)


@pytest.fixture
def store():
    return MemoryStore()


@pytest.fixture
def service(store, url):
    return AppService(store=store, runs=storage.SqlRunStore(url),
                      pairs=PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}))


@pytest.fixture(scope="module")
def history():
    path = sample_history_path("review")
    return NamedHistory(parse_history(path.read_bytes(), filename=path.name), "review sample")


def values(**overrides):
    """Loose values as a form sends them: floats where whole numbers are meant."""
    return {"pairing": TEST_PAIRING_ID, "method": "specsteer", "alpha": 0.1, "draft_len": 4.0,
            "max_new_tokens": 16.0, "retrieval_k": 3.0, **overrides}


# --------------------------------------------------------------------------- settings


def test_settings_from_form_values_are_typed_and_default_the_rest():
    settings = GenerationSettings.from_values(values(seed=7.0, decoding="sampling", exact=True))
    assert settings.draft_len == 4 and isinstance(settings.draft_len, int) and settings.seed == 7
    assert settings.runtime == "auto" and settings.prompt_style == "paper" and settings.beta == 1.0
    config = settings.decode_config()
    assert config.sample and config.exact and config.max_new_tokens == 16
    assert not replace(settings, decoding="greedy").decode_config().exact  # exact only applies to sampling


def test_every_settings_problem_is_reported_at_once_as_sentences():
    with pytest.raises(SettingsError) as caught:
        GenerationSettings.from_values(values(draft_len=2.5, seed=None, alpha="lots", colour="red", exact="yes"))
    problems = caught.value.problems
    assert "Unknown setting 'colour'." in problems
    assert "Draft length must be a whole number, not 2.5." in problems
    assert "Seed needs a value." in problems
    assert "α must be a number, not 'lots'." in problems
    assert "Exact-target sampling must be on or off, not 'yes'." in problems
    assert all(problem.endswith(".") and not problem[0].islower() for problem in problems if problem[0] != "α")


def test_settings_ranges_and_choices_come_back_as_sentences():
    with pytest.raises(SettingsError) as caught:
        GenerationSettings.from_values(values(runtime="onnx", prompt_style="fancy", retrieval_k=-1))
    message = str(caught.value)
    assert "Runtime must be one of auto, llama.cpp, transformers, not 'onnx'." in message
    assert "Prompt style must be one of paper, clean, not 'fancy'." in message
    assert "History items retrieved must be 0 or more." in message
    with pytest.raises(SettingsError, match=r"^Draft length must be between 1 and 16\.$"):
        GenerationSettings.from_values(values(draft_len=0))
    with pytest.raises(SettingsError, match="Choose a pairing"):
        GenerationSettings.from_values({"method": "slm"})
    with pytest.raises(ValueError, match="unknown method"):
        GenerationSettings(pairing="x").for_method("gpt")


# --------------------------------------------------------------------------- one generation


def test_a_generation_streams_typed_events_and_saves_a_typed_row(service, store, history):
    events = [event for event in service.generate(history, "review", INPUT, values(runtime="transformers"))
              if not isinstance(event, Loading)]  # the first test to use the tiny pair builds it
    kinds = [type(event) for event in events]
    assert kinds[0] is Started and kinds[1] is Generating and kinds[-1] is Done
    assert set(kinds[2:-1]) == {Token}
    started, generating, done = events[0], events[1], events[-1]
    assert started.preview.total == len(history.history) and len(started.preview.items) == 3
    assert (generating.runtime, generating.precision) == ("transformers", "fp32")
    result = done.result
    assert result.saved_id == 1 and result.save_error is None and not result.stopped
    assert [event.event for event in events if isinstance(event, Token)] == list(result.tokens)
    saved = store.generations[0]
    assert isinstance(saved.settings, GenerationSettings) and saved.settings.runtime == "transformers"
    assert saved.text == result.finished.text and saved.history_id == 1 and saved.history_name == "review sample"
    assert saved.stats.runtime == "transformers" and saved.stats.ttft_s is not None
    assert result.privacy.audit.ok and result.privacy.transcript == tuple(result.finished.transcript)


def test_the_preview_is_what_the_engine_prepares(service, history):
    for style in ("paper", "clean"):
        preview = service.preview(history, "review", INPUT, 3, style)
        prepared = prepare(Request(task="review", input_text=INPUT, history=history.history.items, retrieval_k=3,
                                   prompt_style=style))
        assert preview.prompts == prepared.prompts
    clean = service.preview(history, "review", INPUT, 3, "clean").prompts.private
    assert "Product: " not in clean and "Product: " in service.preview(history, "review", INPUT, 3, "paper").prompts.private
    assert service.preview(history, "review", "  ", 3).prompts is None


def test_the_prompt_style_reaches_the_prompts_the_cloud_receives(service, store, history):
    *_, done = service.generate(history, "review", INPUT, values(prompt_style="clean"))
    clean = prepare(Request(task="review", input_text=INPUT, history=history.history.items, prompt_style="clean"))
    opening = done.result.finished.transcript[0]
    assert opening.kind == "open" and opening.payload["prompt"] == chat_ids(shared_tiny_pair().tokenizer,
                                                                             clean.prompts.plain)
    assert store.generations[0].settings.prompt_style == "clean"


def test_device_only_methods_have_no_privacy_report(service, history):
    for method in ("slm", "slm+"):
        *_, done = service.generate(history, "review", INPUT, values(method=method))
        assert METHOD_INFO[method].device_only and done.result.privacy is None


@pytest.mark.parametrize(("overrides", "task", "text", "message"), [
    ({"draft_len": 0}, "review", INPUT, "Draft length must be between 1 and 16."),
    ({}, "poem", INPUT, "Choose a task (review, abstract, writing, free)."),
    ({}, "review", "   ", "Enter a task input first."),
    ({"pairing": "qwen3-0.6b__qwen3-32b"}, "review", INPUT, "is unavailable here"),
    ({"pairing": "nope"}, "review", INPUT, "Unknown pairing 'nope'. Choose one from the list."),
    ({"runtime": "llama.cpp"}, "review", INPUT, "The test pair runs on transformers only; choose auto or transformers."),
])
def test_bad_input_is_one_failed_event_and_nothing_is_saved(service, store, history, overrides, task, text, message):
    events = list(service.generate(history, task, text, values(**overrides)))
    assert isinstance(events[-1], Failed) and message in events[-1].message
    assert events[-1].message.endswith(".")
    assert not any(isinstance(event, Token) for event in events) and store.generations == []


def test_a_model_failure_is_a_message(service, store, history, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("the kernel fell over")

    monkeypatch.setattr(service_module, "generate", broken)
    *_, failed = service.generate(history, "review", INPUT, values())
    assert failed == Failed("Generation failed (RuntimeError): the kernel fell over.")
    assert store.generations == []


def test_a_failed_save_still_returns_the_output(history):
    service = AppService(store=MemoryStore(fail=True), runs=None, pairs=PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}))
    *_, done = service.generate(history, "review", INPUT, values())
    assert done.result.saved_id is None and done.result.finished.text is not None
    assert done.result.save_error == "Saving it failed: disk full."


def test_a_stopped_generation_ends_early_and_is_saved(service, store, history):
    cancel = threading.Event()
    events = []
    for event in service.generate(history, "review", INPUT, values(max_new_tokens=1000.0), cancel=cancel):
        events.append(event)
        if isinstance(event, Token):
            cancel.set()
    result = events[-1].result
    assert result.stopped and result.finished.stats.new_tokens < 20
    assert store.generations[0].stats.stop_reason == "cancelled" and result.privacy.audit.ok


def test_slow_loading_reports_progress(history, store):
    class SlowCatalog(PairCatalog):
        def load(self, pairing_id, runtime, progress):
            for line in ("reading weights", "converting"):
                progress(line)
                threading.Event().wait(0.1)
            return shared_tiny_pair()

    service = AppService(store=store, runs=None, pairs=SlowCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
                         loading_quiet_s=0.01)
    events = list(service.generate(history, "review", INPUT, values()))
    lines = [event.message for event in events if isinstance(event, Loading)]
    assert lines[0].startswith("Loading the models (first use")
    assert [line.rsplit(": ", 1)[1] for line in lines[1:]] == ["reading weights", "converting"]
    assert isinstance(events[-1], Done)
    # A pair that comes back quickly (already loaded) reports nothing at all.
    patient = AppService(store=store, runs=None, pairs=SlowCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
                         loading_quiet_s=5)
    assert not any(isinstance(event, Loading) for event in patient.generate(history, "review", INPUT, values()))


def test_a_pairing_that_fails_to_load_is_a_message(history, store):
    class Broken(PairCatalog):
        def load(self, pairing_id, runtime, progress):
            raise OSError("weights not found")

    service = AppService(store=store, runs=None, pairs=Broken({TEST_PAIRING_ID: shared_tiny_pair}))
    *_, failed = service.generate(history, "review", INPUT, values())
    assert failed == Failed("Weights not found.")


# --------------------------------------------------------------------------- comparisons


def test_a_comparison_saves_every_output_then_the_comparison(service, store, history):
    events = list(service.compare(history, "review", INPUT, values(), ["specsteer", "slm+", "llm"], blind=False))
    started = events[0]
    assert isinstance(started, ComparisonStarted) and started.methods == ("slm+", "llm", "specsteer")
    done = [event for event in events if isinstance(event, OutputDone)]
    assert [event.method for event in done] == ["slm+", "llm", "specsteer"]
    saved = events[-1]
    assert isinstance(saved, ComparisonSaved) and saved.comparison.methods == started.methods
    assert [generation.settings.method for generation in store.generations] == list(started.methods)
    comparison = store.comparisons[0]
    assert comparison.generation_ids == (1, 2, 3) and comparison.methods == started.methods and not comparison.blind
    assert all(generation.tokens for generation in store.generations)


def test_a_blind_comparison_shuffles_and_a_stop_saves_nothing(service, store, history):
    orders = {next(iter(service.compare(history, "review", INPUT, values(), ["slm", "slm+", "llm"], blind=True))).methods
              for _ in range(12)}
    assert len(orders) > 1  # shuffled (12 draws of 6 orders all alike would be a 1-in-6^11 event)
    cancel = threading.Event()
    events = []
    for event in service.compare(history, "review", INPUT, values(max_new_tokens=500.0), ["slm", "llm"], True, cancel):
        events.append(event)
        if isinstance(event, Token):
            cancel.set()
    assert isinstance(events[-1], Stopped) and store.comparisons == [] and store.generations == []
    assert list(service.compare(history, "review", INPUT, values(), [], True)) == [
        Failed("Choose at least one method to compare.")]


# --------------------------------------------------------------------------- evaluation runs


def test_an_evaluation_run_goes_through_the_run_store(service, url):
    spec = EvalSpec(data=str(bundled_sample_path("review")), task="review", methods=("llm", "slm+"), limit=1,
                    max_new_tokens=3, retrieval_k=1, pairing=TEST_PAIRING_ID, run_name="service-run")
    events = list(service.evaluate(spec))
    assert isinstance(events[0], Status) and any(isinstance(event, GridProgress) for event in events)
    result = events[-1]
    assert isinstance(result, EvalResult) and result.status == "finished" and result.computed == 2
    assert storage.get_run_by_name("service-run", url=url).cell_count == 2
    bad = list(service.evaluate(replace(spec, methods=())))
    assert len(bad) == 1 and isinstance(bad[0], Failed) and bad[0].message.endswith(".")


# --------------------------------------------------------------------------- pairings and runtimes


def test_the_runtime_note_says_what_auto_picks_and_why(monkeypatch):
    catalog = PairCatalog({TEST_PAIRING_ID: shared_tiny_pair})
    assert "transformers" in catalog.runtime_note(TEST_PAIRING_ID)
    assert catalog.runtime_note("qwen3-0.6b__qwen3-32b") == (
        "Auto picks transformers: these models are not GGUF files, and llama.cpp reads only those.")
    monkeypatch.setattr(service_module, "choose_runtime", lambda pairing, requested, progress: "llama.cpp")
    assert catalog.runtime_note("offline-qwen2.5-coder").startswith("Auto picks llama.cpp here: both models are GGUF")

    def missing(pairing, requested, progress):
        progress("llama-cpp-python is not installed.")
        return "transformers"

    monkeypatch.setattr(service_module, "choose_runtime", missing)
    assert catalog.runtime_note("offline-qwen2.5-coder") == (
        "Auto picks transformers here: llama-cpp-python is not installed.")
