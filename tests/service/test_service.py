"""The application service without any GUI: settings, the generation / comparison / evaluation workflows
as typed events, saving through the store protocol (an in-memory store here), and every failure as a
message."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import dataclass, field, replace

import pytest

import storage
from specsteer.cloud.process import free_loopback_port, start_cloud_process
from specsteer.data.history_upload import parse_history
from specsteer.data.sources import DEFAULT_SAMPLE, SAMPLE_USERS, bundled_sample_path, sample_history_path
from specsteer.engine.request import Request, chat_ids, prepare
from specsteer.engine.settings import SUGGESTED_PRIVATE_GUARD, GenerationSettings, SettingsError
from specsteer.evaluation.grid import EvalResult, EvalSpec, GridProgress
from specsteer.method.catalog import METHOD_INFO
from specsteer.models.calibration import RuntimeChoice
from specsteer.models.runtime_plan import RuntimePlan
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair
from specsteer.protocol.emulation import LinkConditions
from specsteer.protocol.wire import PROTOCOL_VERSION
from specsteer.service import generation as generation_module
from specsteer.service import pair_catalog as catalog_module
from specsteer.service.app_service import AppService
from specsteer.service.events import (
    ComparisonSaved,
    ComparisonStarted,
    Done,
    Failed,
    Generating,
    Loading,
    OutputDone,
    Pending,
    Started,
    Status,
    Stopped,
    Token,
)
from specsteer.service.pair_catalog import PairCatalog
from specsteer.stores.generations import NamedHistory, NewComparison, NewGeneration
from specsteer.util.jsonable import to_jsonable
from testkit import force_drafts

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
    return AppService(
        store=store, runs=storage.SqlRunStore(url), pairs=PairCatalog({TEST_PAIRING_ID: shared_tiny_pair})
    )


@pytest.fixture(scope="module")
def history():
    path = sample_history_path("review")
    return NamedHistory(parse_history(path.read_bytes(), filename=path.name), "review sample")


def values(**overrides):
    """Loose values as a form sends them: floats where whole numbers are meant."""
    return {
        "pairing": TEST_PAIRING_ID,
        "method": "specsteer",
        "alpha": 0.1,
        "draft_len": 4.0,
        "max_new_tokens": 16.0,
        "retrieval_k": 3.0,
        **overrides,
    }


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
    events = [
        event
        for event in service.generate(history, "review", INPUT, values(runtime="transformers"))
        if not isinstance(event, Loading)
    ]  # the first test to use the tiny pair builds it
    kinds = [type(event) for event in events]
    assert kinds[0] is Started and kinds[1] is Generating and kinds[-1] is Done
    assert set(kinds[2:-1]) == {Token, Pending}  # drafts on screen before their verdict, then settled
    started, generating, done = events[0], events[1], events[-1]
    assert started.preview.total == len(history.history) and len(started.preview.items) == 3
    assert started.preview == service.preview(history, "review", INPUT, 3)  # built from the generation's own request
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
        prepared = prepare(
            Request(task="review", input_text=INPUT, history=history.history.items, retrieval_k=3, prompt_style=style)
        )
        assert preview.prompts == prepared.prompts
    clean = service.preview(history, "review", INPUT, 3, "clean").prompts.private
    assert (
        "Product: " not in clean
        and "Product: " in service.preview(history, "review", INPUT, 3, "paper").prompts.private
    )
    assert service.preview(history, "review", "  ", 3).prompts is None


def test_the_prompt_style_reaches_the_prompts_the_cloud_receives(service, store, history):
    *_, done = service.generate(history, "review", INPUT, values(prompt_style="clean"))
    clean = prepare(Request(task="review", input_text=INPUT, history=history.history.items, prompt_style="clean"))
    opening = done.result.finished.transcript[0]
    assert opening.kind == "open" and opening.payload["prompt"] == chat_ids(
        shared_tiny_pair().tokenizer, clean.prompts.plain
    )
    assert store.generations[0].settings.prompt_style == "clean"


def test_device_only_methods_have_no_privacy_report(service, history):
    for method in ("slm", "slm+"):
        *_, done = service.generate(history, "review", INPUT, values(method=method))
        assert METHOD_INFO[method].device_only and done.result.privacy is None


def test_the_privacy_report_names_the_history_that_crossed_and_offers_the_guard(service, monkeypatch):
    """The default persona's name, drafted by the Specialist in one round (forced here: the tiny models copy
    nothing) and accepted (alpha 0), is named; the report offers the same settings with the guard on, and a generation
    with them says the guard was on."""
    path = sample_history_path(DEFAULT_SAMPLE)
    persona = NamedHistory(parse_history(path.read_bytes(), filename=path.name), "persona")
    task_input = SAMPLE_USERS[DEFAULT_SAMPLE].input_text
    force_drafts(monkeypatch, b"Gregory Simmons ")  # 16 bytes: one round's drafts, a space before the bonus token
    *_, done = service.generate(
        persona, "cogenesis", task_input, values(alpha=0.0, draft_len=16.0, max_new_tokens=20.0)
    )
    privacy = done.result.privacy
    crossing = privacy.crossing
    assert "Gregory Simmons" in [phrase.text for phrase in crossing.phrases] and crossing.guard == 0
    assert "'Gregory Simmons'" in crossing.headline()
    offer = privacy.guard_offer  # the settings of this generation, the guard on
    asked = GenerationSettings.from_values(values(alpha=0.0, draft_len=16.0, max_new_tokens=20.0))
    assert offer == replace(asked, private_guard=SUGGESTED_PRIVATE_GUARD)
    *_, guarded = service.generate(persona, "cogenesis", task_input, offer)
    assert guarded.result.privacy.crossing.guard == SUGGESTED_PRIVATE_GUARD
    assert guarded.result.privacy.guard_offer is None  # on already
    assert GenerationSettings(pairing=TEST_PAIRING_ID, method="llm").guarded() is None  # the Edge sends nothing


@pytest.mark.parametrize(
    ("overrides", "task", "text", "message"),
    [
        ({"draft_len": 0}, "review", INPUT, "Draft length must be between 1 and 16."),
        ({}, "poem", INPUT, "Choose a task (review, abstract, writing, free, cogenesis)."),
        ({}, "review", "   ", "Enter a task input first."),
        ({"pairing": "qwen3-0.6b__qwen3-32b"}, "review", INPUT, "is unavailable here"),
        ({"pairing": "nope"}, "review", INPUT, "Unknown pairing 'nope'. Choose one from the list."),
        (
            {"runtime": "llama.cpp"},
            "review",
            INPUT,
            "The test pair runs on transformers only; choose auto or transformers.",
        ),
    ],
)
def test_bad_input_is_one_failed_event_and_nothing_is_saved(service, store, history, overrides, task, text, message):
    events = list(service.generate(history, task, text, values(**overrides)))
    assert isinstance(events[-1], Failed) and message in events[-1].message
    assert events[-1].message.endswith(".")
    assert not any(isinstance(event, Token) for event in events) and store.generations == []


def test_a_model_failure_is_a_message(service, store, history, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("the kernel fell over")

    monkeypatch.setattr(generation_module, "generate", broken)
    *_, failed = service.generate(history, "review", INPUT, values())
    assert failed == Failed("Generation failed (RuntimeError): the kernel fell over.")
    assert store.generations == []


def test_a_failed_save_still_returns_the_output(history):
    service = AppService(
        store=MemoryStore(fail=True), runs=None, pairs=PairCatalog({TEST_PAIRING_ID: shared_tiny_pair})
    )
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
        def load(self, pairing_id, runtime, progress, edge_only=False, method="specsteer"):
            for line in ("reading weights", "converting"):
                progress(line)
                threading.Event().wait(0.1)
            return shared_tiny_pair()

    service = AppService(
        store=store, runs=None, pairs=SlowCatalog({TEST_PAIRING_ID: shared_tiny_pair}), loading_quiet_s=0.01
    )
    events = list(service.generate(history, "review", INPUT, values()))
    lines = [event.message for event in events if isinstance(event, Loading)]
    assert lines[0].startswith("Loading the models (first use")
    assert [line.rsplit(": ", 1)[1] for line in lines[1:]] == ["reading weights", "converting"]
    assert isinstance(events[-1], Done)
    # A pair that comes back quickly (already loaded) reports nothing at all.
    patient = AppService(
        store=store, runs=None, pairs=SlowCatalog({TEST_PAIRING_ID: shared_tiny_pair}), loading_quiet_s=5
    )
    assert not any(isinstance(event, Loading) for event in patient.generate(history, "review", INPUT, values()))


def test_a_pairing_that_fails_to_load_is_a_message(history, store):
    class Broken(PairCatalog):
        def load(self, pairing_id, runtime, progress, edge_only=False, method="specsteer"):
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
    orders = {
        next(iter(service.compare(history, "review", INPUT, values(), ["slm", "slm+", "llm"], blind=True))).methods
        for _ in range(12)
    }
    assert len(orders) > 1  # shuffled (12 draws of 6 orders all alike would be a 1-in-6^11 event)
    cancel = threading.Event()
    events = []
    for event in service.compare(history, "review", INPUT, values(max_new_tokens=500.0), ["slm", "llm"], True, cancel):
        events.append(event)
        if isinstance(event, Token):
            cancel.set()
    assert isinstance(events[-1], Stopped) and store.comparisons == [] and store.generations == []
    assert list(service.compare(history, "review", INPUT, values(), [], True)) == [
        Failed("Choose at least one method to compare.")
    ]


# --------------------------------------------------------------------------- evaluation runs


def test_an_evaluation_run_goes_through_the_run_store(service, url):
    spec = EvalSpec(
        data=str(bundled_sample_path("review")),
        task="review",
        methods=("llm", "slm+"),
        limit=1,
        max_new_tokens=3,
        retrieval_k=1,
        pairing=TEST_PAIRING_ID,
        run_name="service-run",
    )
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
        "Auto picks transformers: these models are not GGUF files, and llama.cpp reads only those."
    )
    llama = RuntimePlan.uniform(RuntimeChoice("llama.cpp", "no calibration; run `specsteer calibrate`"))
    monkeypatch.setattr(catalog_module, "runtime_plan", lambda pairing, requested, progress: llama)
    assert catalog.runtime_note("offline-qwen2.5-coder").startswith("Auto picks llama.cpp here: both models are GGUF")

    def missing(pairing, requested, progress):
        progress("llama-cpp-python is not installed.")
        return RuntimePlan.uniform(RuntimeChoice("transformers", "llama-cpp-python is not installed."))

    monkeypatch.setattr(catalog_module, "runtime_plan", missing)
    assert catalog.runtime_note("offline-qwen2.5-coder") == (
        "Auto picks transformers here: llama-cpp-python is not installed."
    )


# --------------------------------------------------------------------------- where the Cloud runs


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("", ""),
        ("   ", ""),
        ("http://127.0.0.1:8700", "http://127.0.0.1:8700"),
        (" HTTP://Cloud.Example.ORG:8700/ ", "http://cloud.example.org:8700"),
        ("https://cloud.example.org", "https://cloud.example.org:443"),
        ("http://cloud.example.org", "http://cloud.example.org:80"),
        ("http://[::1]:8700", "http://[::1]:8700"),
    ],
)
def test_the_cloud_setting_keeps_scheme_host_and_port(given, kept):
    settings = GenerationSettings.from_values(values(cloud=given))
    assert settings.cloud == kept and settings.remote == bool(kept)
    assert GenerationSettings(pairing=TEST_PAIRING_ID, cloud=given).validate().cloud == kept


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("ftp://cloud.example.org:21", "Cloud must be an http:// or https:// address such as http://127.0.0.1:8700"),
        ("cloud.example.org:8700", "Cloud must be an http:// or https:// address"),
        ("http://", "Cloud must be an http:// or https:// address"),
        ("http://alice:hunter2@cloud.example.org:8700", "Cloud must not carry a user name or password"),
        ("https://hunter2@cloud.example.org", "Cloud must not carry a user name or password"),
        ("http://cloud.example.org:8700/v1/info", "without a path, query or fragment"),
        ("http://cloud.example.org:8700/?token=hunter2", "without a path, query or fragment"),
        ("http://cloud.example.org:8700#hunter2", "without a path, query or fragment"),
        ("http://cloud.example.org:99999", "does not read as one"),
    ],
)
def test_a_bad_cloud_address_is_a_sentence_that_never_repeats_a_secret(given, message):
    with pytest.raises(SettingsError) as caught:
        GenerationSettings.from_values(values(cloud=given))
    assert message in str(caught.value) and str(caught.value).endswith(".")
    assert "hunter2" not in str(caught.value)


def test_link_emulation_settings_become_link_conditions():
    settings = GenerationSettings.from_values(values(rtt_ms=50.0, uplink_kbps=2000.0))
    assert settings.link_conditions() == LinkConditions(rtt_ms=50.0, uplink_kbps=2000.0, downlink_kbps=math.inf)
    assert GenerationSettings.from_values(values()).link_conditions() is None
    with pytest.raises(SettingsError) as caught:
        GenerationSettings.from_values(values(rtt_ms=-1.0, uplink_kbps=0.5, downlink_kbps=float("inf")))
    assert caught.value.problems == [
        "Round-trip time must be between 0 and 2000 ms.",
        "Uplink bandwidth must be 0 (unlimited) or at least 1 kbps.",
        "Downlink bandwidth must be 0 (unlimited) or at least 1 kbps.",
    ]


def test_an_emulated_link_delays_every_exchange_and_is_saved_with_the_output(service, store, history):
    *_, plain = service.generate(history, "review", INPUT, values(max_new_tokens=8.0))
    *_, emulated = service.generate(history, "review", INPUT, values(max_new_tokens=8.0, rtt_ms=20.0))
    stats = emulated.result.finished.stats
    waits = [step.seconds for step in stats.trace if step.kind == "message"]
    assert stats.rounds > 0
    # A round waits one RTT; the waits are differences of clock readings, so allow float rounding.
    assert sum(waits) >= 0.020 * stats.rounds - 1e-9
    assert emulated.result.finished.text == plain.result.finished.text
    assert store.generations[1].settings.rtt_ms == 20.0 and store.generations[0].settings.link_conditions() is None


@dataclass(frozen=True)
class RecordingCatalog(PairCatalog):
    """Records whether each load asked for the Edge alone."""

    loads: list = field(default_factory=list)

    def load(self, pairing_id, runtime, progress, edge_only=False, method="specsteer"):
        self.loads.append(edge_only)
        return super().load(pairing_id, runtime, progress, edge_only)


def test_a_cloud_that_is_not_there_fails_before_anything_loads(store, history):
    service = AppService(store=store, runs=None, pairs=RecordingCatalog({TEST_PAIRING_ID: shared_tiny_pair}))
    address = f"http://127.0.0.1:{free_loopback_port()}"
    events = list(service.generate(history, "review", INPUT, values(cloud=address + "/")))
    assert isinstance(events[0], Started) and events[0].settings.cloud == address
    assert isinstance(events[-1], Failed) and events[-1].partial is None
    assert events[-1].message.startswith(f"Lost the connection to the Cloud at {address}")
    assert service.pairs.loads == [] and store.generations == []
    # A device-only method never needs the Cloud, and loads the Edge alone.
    *_, done = service.generate(history, "review", INPUT, values(method="slm+", cloud=address))
    assert isinstance(done, Done) and service.pairs.loads == [True]


def test_checking_a_cloud_address_never_raises(service):
    address = f"http://127.0.0.1:{free_loopback_port()}"
    absent = service.check_cloud(address + "/", TEST_PAIRING_ID)
    assert (absent.ok, absent.address, absent.info) == (False, address, None)
    assert absent.message.startswith(f"Lost the connection to the Cloud at {address}") and absent.message.endswith(".")
    bad = service.check_cloud("http://alice:hunter2@example.org:1")
    assert not bad.ok and "hunter2" not in bad.message and "user name or password" in bad.message
    here = service.check_cloud("  ")
    assert here.ok and here.address == "" and "inside this app" in here.message


# The Cloud as a child process (``python -m specsteer cloud --pairing tiny-test``) on a free loopback
# port, stopped by its pid; it wants the shared secret, which only the service's constructor is given.
CLOUD_SECRET_ENV = "SPECSTEER_TEST_SERVICE_CLOUD_SECRET"
CLOUD_SECRET = "service test: correct horse battery staple"
CLOUD_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", CLOUD_SECRET_ENV: CLOUD_SECRET}


def start_cloud(directory, port=None):
    log = (directory / f"cloud-{time.monotonic_ns()}.log").open("wb")
    return start_cloud_process(
        "--pairing",
        TEST_PAIRING_ID,
        "--no-prefix-reuse",
        "--secret-env",
        CLOUD_SECRET_ENV,
        port=port,
        env=CLOUD_ENV,
        stderr=log,
        ready_timeout_s=180,
    )


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    child = start_cloud(tmp_path_factory.mktemp("cloud"))
    try:
        yield child
    finally:
        child.stop()


def remote_service(store, secret=CLOUD_SECRET, pairing=TEST_PAIRING_ID):
    return AppService(store=store, runs=None, pairs=RecordingCatalog({pairing: shared_tiny_pair}), cloud_secret=secret)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["specsteer", "llm", "lightcosteer", "sd"])
def test_a_generation_through_a_cloud_process_equals_the_in_process_one(cloud, history, method):
    here, there = remote_service(MemoryStore()), remote_service(MemoryStore())
    chosen = values(method=method, alpha=0.05, max_new_tokens=24.0)
    shared_tiny_pair().clear_prefix_caches()
    *_, in_process = here.generate(history, "review", INPUT, chosen)
    shared_tiny_pair().clear_prefix_caches()
    events = list(there.generate(history, "review", INPUT, {**chosen, "cloud": cloud.url + "/"}))
    remote = events[-1]
    assert isinstance(remote, Done), remote
    assert [(t.id, t.kind, t.round) for t in remote.result.tokens] == [
        (t.id, t.kind, t.round) for t in in_process.result.tokens
    ]
    assert remote.result.finished.text == in_process.result.finished.text
    ours, theirs = in_process.result.finished.stats, remote.result.finished.stats
    assert (theirs.uplink_bytes, theirs.downlink_bytes, theirs.rounds) == (
        ours.uplink_bytes,
        ours.downlink_bytes,
        ours.rounds,
    )
    assert here.pairs.loads == [False] and there.pairs.loads == [True]  # the Edge alone beside a remote Cloud
    assert remote.result.privacy.audit.ok
    saved = there.store.generations[0]
    assert saved.settings.cloud == cloud.url and here.store.generations[0].settings.cloud == ""
    assert CLOUD_SECRET not in json.dumps(to_jsonable(saved.settings))


@pytest.mark.slow
def test_a_comparison_runs_every_method_through_the_cloud(cloud, history):
    methods = ["slm+", "llm", "specsteer"]
    here, there = remote_service(MemoryStore()), remote_service(MemoryStore())
    shared_tiny_pair().clear_prefix_caches()
    *_, in_process = here.compare(history, "review", INPUT, values(), methods, blind=False)
    shared_tiny_pair().clear_prefix_caches()
    *_, remote = there.compare(history, "review", INPUT, values(cloud=cloud.url), methods, blind=False)
    assert isinstance(remote, ComparisonSaved) and remote.comparison.texts == in_process.comparison.texts
    assert there.pairs.loads == [True] and {g.settings.cloud for g in there.store.generations} == {cloud.url}


@pytest.mark.slow
def test_a_cloud_of_another_pairing_or_without_the_secret_is_refused_before_loading(cloud, history, store):
    other = remote_service(store, pairing="tiny-other")
    *_, failed = other.generate(history, "review", INPUT, values(pairing="tiny-other", cloud=cloud.url))
    assert failed.message == (
        f"The Cloud at {cloud.url} serves the pairing “tiny-test”, but the pairing chosen here is “tiny-other”: "
        "the Cloud must verify with the Specialist this Edge drafts with. Choose “tiny-test”, or start the Cloud "
        "with --pairing tiny-other."
    )
    assert other.pairs.loads == [] and store.generations == []
    mismatch = other.check_cloud(cloud.url, "tiny-other")
    assert not mismatch.ok and mismatch.info.pairing == TEST_PAIRING_ID and "serves the pairing" in mismatch.message
    check = remote_service(store).check_cloud(cloud.url, TEST_PAIRING_ID)
    assert check.ok and check.info.protocol == PROTOCOL_VERSION and check.info.limits["max_sessions"] >= 1
    assert check.message == (
        f"The Cloud at {cloud.url} answers: it serves “tiny-test”, the pairing chosen here, "
        f"protocol version {PROTOCOL_VERSION}."
    )
    without_secret = remote_service(store, secret=None)
    *_, refused = without_secret.generate(history, "review", INPUT, values(cloud=cloud.url))
    assert isinstance(refused, Failed) and "shared secret" in refused.message
    assert not without_secret.check_cloud(cloud.url).ok and without_secret.pairs.loads == []


@pytest.mark.slow
def test_a_cloud_killed_mid_generation_keeps_and_saves_what_was_emitted(tmp_path, history, store):
    child = start_cloud(tmp_path)
    service = remote_service(store)
    events, killed_at = [], None
    try:
        chosen = values(max_new_tokens=200.0, draft_len=2.0, alpha=0.5, cloud=child.url)
        for event in service.generate(history, "review", INPUT, chosen):
            events.append(event)
            if killed_at is None and sum(isinstance(seen, Token) for seen in events) >= 4:
                child.kill()
                killed_at = time.monotonic()
        ended = time.monotonic()
    finally:
        child.stop()
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.partial is not None and ended - killed_at < 5.0
    assert failed.message.startswith(f"Lost the connection to the Cloud at {child.url}")
    assert "generated before it failed are kept and saved as generation #1." in failed.message
    partial = failed.partial
    shown = [event.event for event in events if isinstance(event, Token)]
    assert list(partial.tokens) == shown
    emitted = [token for token in shown if token.emitted]
    assert partial.finished.token_ids == [token.id for token in emitted] and len(emitted) >= 2
    assert partial.finished.text == "".join(token.text for token in emitted) and partial.privacy.audit.ok
    saved = store.generations[0]
    assert saved.stats.stop_reason == "cloud-error" and saved.text == partial.finished.text
    assert saved.settings.cloud == child.url and partial.saved_id == 1


# --------------------------------------------------------------------------- a public deployment


class RecordingListener:
    """An HTTP listener on loopback that records the Authorization header of every request it gets."""

    def __init__(self) -> None:
        import http.server

        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(self.headers.get("Authorization"))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_public_service_reaches_only_the_operators_clouds_and_sends_its_secret_only_there(store, history):
    from specsteer.protocol.exposure import Exposure

    configured, visitor_named = RecordingListener(), RecordingListener()
    try:
        public = AppService(
            store=store,
            runs=None,
            pairs=RecordingCatalog({TEST_PAIRING_ID: shared_tiny_pair}),
            cloud_secret="operator-secret",
            exposure=Exposure(public=True, why="test", cloud_urls=(configured.url,)),
        )
        closed_port = f"http://127.0.0.1:{free_loopback_port()}"
        for address in (visitor_named.url, closed_port, "http://169.254.169.254:80"):
            *_, failed = public.generate(history, "review", INPUT, values(cloud=address))
            assert isinstance(failed, Failed) and "does not connect to other addresses" in failed.message
            check = public.check_cloud(address, TEST_PAIRING_ID)
            # The same answer for an open port, a closed one and a metadata address: nothing to scan with.
            assert not check.ok and check.message == failed.message and check.info is None
        assert visitor_named.seen == [] and public.pairs.loads == []
        *_, refused = public.generate(history, "review", INPUT, values(cloud=configured.url))
        assert isinstance(refused, Failed) and "HTTP 404" in refused.message
        assert configured.seen == ["Bearer operator-secret"]
        *_, done = public.generate(history, "review", INPUT, values(cloud=""))  # in process stays open
        assert isinstance(done, Done)
    finally:
        configured.close()
        visitor_named.close()


def test_a_local_service_keeps_the_free_cloud_field(store, history):
    listener = RecordingListener()
    try:
        local = AppService(
            store=store, runs=None, pairs=PairCatalog({TEST_PAIRING_ID: shared_tiny_pair}), cloud_secret="mine"
        )
        assert not local.check_cloud(listener.url).ok and listener.seen == ["Bearer mine"]
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("environ", "public"),
    [
        ({}, False),
        ({"GRADIO_SERVER_NAME": "127.0.0.1"}, False),
        ({"SPACE_ID": "someone/specsteer"}, True),
        ({"GRADIO_SERVER_NAME": "0.0.0.0"}, True),
        ({"SPECSTEER_PUBLIC": "1"}, True),
        ({"SPACE_ID": "someone/private-space", "SPECSTEER_PUBLIC": "0"}, False),
    ],
)
def test_the_app_tells_a_public_deployment_from_a_local_run(environ, public):
    from specsteer.protocol.exposure import Exposure

    exposure = Exposure.from_environment(environ)
    assert exposure.public is public and exposure.why


def test_the_operator_lists_the_clouds_and_holds_the_export_token():
    from specsteer.protocol.exposure import Exposure

    exposure = Exposure.from_environment(
        {
            "SPACE_ID": "x/y",
            "SPECSTEER_CLOUD_URLS": "http://cloud-a.example.org:8700, https://cloud-b.example.org",
            "SPECSTEER_CLOUD_URL": "http://cloud-a.example.org:8700/",
            "SPECSTEER_ADMIN_TOKEN": "tok",
        }
    )
    assert exposure.cloud_urls == ("http://cloud-a.example.org:8700", "https://cloud-b.example.org:443")
    assert exposure.cloud_problem("https://cloud-b.example.org:443") is None
    assert exposure.cloud_problem("http://elsewhere.example.org:80")
    assert exposure.may_export_all("tok") and not exposure.may_export_all("") and not exposure.may_export_all("x")
    assert not Exposure(public=True).may_export_all("anything")  # no token configured: nobody exports in public
    assert Exposure().may_export_all(None)  # locally the user is the operator


def test_a_cross_tokenizer_pair_generates_audits_and_refuses_a_method_it_cannot_run(store, history):
    from specsteer.models.tiny import CROSS_PAIRING_ID, shared_test_pair

    service = AppService(
        store=store, runs=None, pairs=PairCatalog({CROSS_PAIRING_ID: lambda: shared_test_pair(CROSS_PAIRING_ID)})
    )
    *_, done = service.generate(history, "review", INPUT, values(pairing=CROSS_PAIRING_ID))
    assert isinstance(done, Done) and done.result.privacy.audit.ok, done
    assert done.result.finished.transcript[0].kind == "cross-open"
    *_, refused = service.generate(history, "review", INPUT, values(pairing=CROSS_PAIRING_ID, method="sd"))
    assert isinstance(refused, Failed) and "not available on a cross-tokenizer pairing" in refused.message
    events = list(
        service.compare(
            history, "review", INPUT, values(pairing=CROSS_PAIRING_ID), ["specsteer", "costeer"], blind=False
        )
    )
    assert isinstance(events[-1], Failed) and "CoSteer is not available" in events[-1].message
    assert not any(isinstance(event, OutputDone) for event in events) and not store.comparisons
    assert len(store.generations) == 1  # only the first generation ran and was saved
