"""The UI's handlers called as plain functions (no server): tiny random models, a temporary database.

Each tab's handlers are methods of a small class over one ``AppService`` (what ``app.py`` builds), so a
test builds the same service and calls them, collecting a streamed handler with ``list(...)``.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

import app
import storage
from specsteer.cloud.process import free_loopback_port
from specsteer.data.history_upload import MAX_UPLOAD_BYTES
from specsteer.data.sources import DEFAULT_SAMPLE, SAMPLE_USERS, bundled_sample_path
from specsteer.evaluation.deployment_profiles import PROFILES
from specsteer.method.catalog import METHOD_INFO, METHODS, method_label
from specsteer.method.events import GenerationStats, TokenEvent
from specsteer.protocol.cloud_reports import CloudInfo
from specsteer.protocol.emulation import LinkConditions
from specsteer.protocol.exposure import CLOUD_URL_ENV
from specsteer.service import judging, page
from specsteer.service.events import CloudCheck, Done, Failed, Generating, Started, Token
from specsteer.stores.runs import CellResult, GridPoint
from testkit import widget_settings
from ui import compare_handlers, dashboard_handlers, generate_handlers, pairs, render, streaming
from ui.markup import esc
from ui.stats_html import StatsView, stats_html
from ui.streaming import BackgroundRun, Throttle, Toast, merge_frames
from ui.token_html import TokenHtml, token_span

XSS_SCRIPT = "<script>window.__pwned=1</script>"
XSS_IMG = '<img src=x onerror="window.__pwned=1">'


pytestmark = pytest.mark.usefixtures("tiny_app")


@pytest.fixture
def service():
    return app.build_service()


@pytest.fixture
def app_database(db_url, monkeypatch):
    """The app's database (``DATABASE_URL``) on SQLite and on PostgreSQL, for the tests of what it saves."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    return db_url


@pytest.fixture
def generate(service):
    return generate_handlers.GenerateTab(service)


@pytest.fixture
def compare(service):
    return compare_handlers.CompareTab(service)


@pytest.fixture
def dashboard(service):
    return dashboard_handlers.DashboardTab(service)


def own_runs(dashboard) -> list[tuple[str, int]]:
    """The run picker's choices that are the user's runs (listed first; the example runs follow)."""
    return [(label, run_id) for label, run_id in dashboard.run_choices() if not label.startswith("example:")]


def settings(**overrides):
    """The widgets' values for a short greedy SpecSteer run on the tiny pair."""
    return widget_settings(**{"pairing": pairs.TINY_PAIRING_ID, "max_new_tokens": 24, **overrides})


TASK_INPUT = dict(task="review", input_text="Write a review of a power bank with great battery life")


def run_generate(tab, loaded, task="review", input_text=TASK_INPUT["input_text"], **overrides):
    return list(tab.generate(loaded, task, input_text, **settings(**overrides)))


def sample_history():
    return page.read_sample("review")


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


# --------------------------------------------------------------------------- rendering


def test_everything_rendered_from_text_is_escaped():
    event = TokenEvent(id=5, text=XSS_IMG + "\x15", kind="accepted", round=1, ratio=0.5)
    span = token_span(event)
    assert "<img" not in span and "&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;" in span
    assert "\u2415" in span  # a control character shown as its control picture
    assert "ss-tok-accepted" in span
    box = render.message_box(XSS_SCRIPT, "error")
    assert "<script>" not in box and "&lt;script&gt;" in box
    slot = render.comparison_slot_html("A", XSS_SCRIPT, "specsteer", GenerationStats("specsteer", new_tokens=3))
    assert "<script>" not in slot


def test_rejected_drafts_are_struck_and_whitespace_stays_visible():
    span = token_span(TokenEvent(id=1, text=" \n", kind="rejected", round=2))
    assert span.startswith("<del") and "\u2423" in span and "\u21b5" in span


def test_token_html_only_grows_at_its_end():
    stream = TokenHtml()
    before = stream.html
    for kind in ("accepted", "rejected", "recovered", "bonus"):
        stream.add(TokenEvent(id=1, text="ab", kind=kind, round=1))
        after = stream.html
        assert after.startswith(before) and len(after) > len(before)
        before = after


def test_throttle_limits_updates():
    throttle = Throttle(every=5, seconds=60)
    assert sum(throttle.due() for _ in range(100)) == 20


def test_live_stats_count_tokens_and_follow_the_running_byte_totals():
    from ui.streaming import LiveStats

    live = LiveStats("specsteer")
    live.add(TokenEvent(id=1, text="a", kind="accepted", round=1, uplink_bytes=40))
    live.add(TokenEvent(id=2, text="b", kind="rejected", round=1, uplink_bytes=40, downlink_bytes=81))
    live.add(TokenEvent(id=3, text="c", kind="recovered", round=1, uplink_bytes=40, downlink_bytes=81))
    assert (live.emitted, live.accepted, live.rejected, live.rounds) == (2, 1, 1, 1)
    assert (live.uplink_bytes, live.downlink_bytes) == (40, 81)
    live.add(TokenEvent(id=4, text="d", kind="bonus", round=2, uplink_bytes=120, downlink_bytes=600))
    assert (live.uplink_bytes, live.downlink_bytes, live.rounds) == (120, 600, 2)


def test_the_stats_strip_shows_runtime_precision_first_token_and_prefix_reuse():
    stats = GenerationStats(
        "specsteer",
        new_tokens=12,
        seconds=2.0,
        accepted=9,
        drafted=12,
        rounds=3,
        uplink_bytes=120,
        downlink_bytes=300,
        stop_reason="eos",
        runtime="llama.cpp",
        precision="Q4_K_M",
        ttft_s=0.84,
        reused_tokens={"specialist+": 812, "generalist": 0},
    )
    strip = stats_html(StatsView.final(stats))
    assert "llama.cpp · Q4_K_M" in strip and "0.84 s" in strip and "812 tokens" in strip
    assert "specialist+: 812, generalist: 0" in strip and 'data-state="eos"' in strip
    from ui.streaming import LiveStats

    live = LiveStats("specsteer", "transformers", "bf16")
    assert "transformers · bf16" in stats_html(live.view("running"))
    live.add(TokenEvent(id=1, text="a", kind="accepted", round=1))
    assert live.first_token_s is not None and "–" in stats_html(live.view("running"))  # reuse known at the end


def test_the_stats_strip_says_where_the_cloud_ran_and_which_link_was_emulated():
    stats = GenerationStats("specsteer", new_tokens=3, seconds=1.0)
    here = stats_html(StatsView.final(stats))
    assert ">cloud<" in here and ">inside this app<" in here and "emulated link" not in here
    remote = stats_html(
        StatsView.final(stats, cloud="http://127.0.0.1:8700", link=LinkConditions(rtt_ms=50, uplink_kbps=2000))
    )
    assert ">http://127.0.0.1:8700<" in remote and "RTT 50 ms · up 2,000 kbps · down unlimited" in remote
    device = stats_html(StatsView.final(GenerationStats("slm+"), cloud="http://127.0.0.1:8700"))
    assert ">not used<" in device and "8700" not in device


def test_background_run_merges_frames_without_losing_updates():
    skip = gr.skip()
    assert merge_frames(("a", "b"), (skip, "c")) == ("a", "c")

    def produce(flag):
        yield ("status 1", "retrieved", skip)
        for number in range(50):
            yield (skip, skip, f"output {number}")
        yield ("done", skip, skip)

    run = BackgroundRun(produce, width=3, name="test")
    frames = list(run.frames(min_interval=0.01))
    # Coalesced, never padded: at most one frame per update produced, each as wide as the outputs, none of
    # them an update that changes nothing.
    assert 1 <= len(frames) <= 52 and all(len(frame) == 3 for frame in frames)
    assert not any(all(value is skip or value == skip for value in frame) for frame in frames)
    merged = frames[0]
    for frame in frames[1:]:
        merged = merge_frames(merged, frame)
    assert merged == ("done", "retrieved", "output 49") == run.state


def test_background_run_errors_reach_the_consumer_and_stop_sets_the_flag():
    def failing(flag):
        yield ("one",)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        list(BackgroundRun(failing, width=1, name="test").frames())

    def endless(flag):
        while not flag.is_set():
            yield ("tick",)
        yield ("stopped",)

    run = BackgroundRun(endless, width=1, name="test")
    run.stop(timeout=5)
    assert run.done and run.state == ("stopped",)


def test_a_runs_warnings_are_shown_from_the_handlers_thread_in_order(monkeypatch):
    """gr.Warning reaches the page only from the handler's thread: Gradio finds the request in context
    variables that a worker thread does not inherit. A run yields its toasts; frames() shows them."""
    shown: list[tuple[str, threading.Thread]] = []
    monkeypatch.setattr(streaming.gr, "Warning", lambda message: shown.append((message, threading.current_thread())))

    def produce(flag):
        yield ("first",)
        yield Toast("the Cloud went away")
        yield Toast("and came back")
        yield ("last",)

    frames = list(BackgroundRun(produce, width=1, name="test").frames(min_interval=0.05))
    assert [message for message, _ in shown] == ["the Cloud went away", "and came back"]
    assert all(thread is threading.current_thread() for _, thread in shown)
    assert frames[-1] == ("last",)


def test_a_failed_generation_warns_from_the_handlers_thread(generate, monkeypatch):
    shown: list[tuple[str, threading.Thread]] = []
    monkeypatch.setattr(streaming.gr, "Warning", lambda message: shown.append((message, threading.current_thread())))
    frames = run_generate(generate, sample_history(), draft_len=0)
    assert "ss-box-error" in frames[-1].status
    assert len(shown) == 1 and "Draft length must be between 1 and 16." in shown[0][0]
    assert shown[0][1] is threading.current_thread()


# --------------------------------------------------------------------------- history


def test_sample_users_load_with_their_task_and_input(generate):
    for sample in SAMPLE_USERS:
        loaded, summary, task, text, upload = generate.load_sample(sample)
        assert len(loaded.history) > 0
        assert f"Read {len(loaded.history)} item" in summary
        assert task in ("review", "writing", "abstract", "free", "cogenesis") and text  # cogenesis: personas
        assert upload is None  # a sample replaces an upload: the upload box is cleared


def test_upload_formats_are_read(generate, tmp_path):
    items = [
        {"summary": "Great battery", "reviewText": "Lasts two days.", "overall": "5.0"},
        {"summary": "Meh", "reviewText": "Broke after a week.", "overall": "2.0"},
    ]
    files = {
        "h.json": json.dumps(items),
        "h.jsonl": "\n".join(json.dumps(item) for item in items),
        "h.csv": "summary,reviewText,overall\nGreat battery,Lasts two days.,5.0\nMeh,Broke after a week.,2.0\n",
        "h.txt": "First paragraph.\n\nSecond paragraph.\n\nThird.",
        "h16.txt": "\ufeffFirst paragraph.\n\nSecond paragraph.\n\nThird.".encode("utf-16-le"),
    }
    for name, content in files.items():
        loaded, summary, task, _sample = generate.load_upload(write(tmp_path, name, content), None)
        assert "Read" in summary and name in summary
        assert len(loaded.history) == (3 if name.endswith(".txt") else 2)
        assert task == ("free" if name.endswith(".txt") else "review")


def test_after_an_upload_the_sample_dropdown_names_no_sample(generate, tmp_path):
    """The upload replaced the sample's history, so the "Sample user" dropdown must not still name it."""
    loaded, _summary, _task, sample = generate.load_upload(write(tmp_path, "mine.txt", "One.\n\nTwo."), None)
    assert loaded.name == "“mine.txt”" and sample is None
    _state, _summary, _task, sample = generate.load_upload(write(tmp_path, "bad.json", "[{"), sample_history())
    assert sample == gr.skip()  # a refused file keeps the history, and the name of it


def test_malformed_upload_gives_a_clear_message_and_keeps_the_history(generate, tmp_path):
    current = sample_history()
    state, summary, task, _ = generate.load_upload(write(tmp_path, "bad.json", '[{"summary": "x",'), current)
    assert state == gr.skip() and task == gr.skip()
    assert "ss-box-error" in summary and "malformed JSON" in summary and "line 1" in summary
    assert "Traceback" not in summary and "Still using" in summary


def test_oversized_upload_is_refused(generate, tmp_path):
    path = write(tmp_path, "big.txt", b"a" * (MAX_UPLOAD_BYTES + 1))
    _, summary, _, _ = generate.load_upload(path, None)
    assert "limit is 5 MB." in summary


def test_unsupported_file_type_is_refused(generate, tmp_path):
    _, summary, _, _ = generate.load_upload(write(tmp_path, "history.pdf", b"%PDF"), None)
    assert "unsupported file type" in summary


def test_retrieval_preview_shows_scored_items_escaped(generate, tmp_path):
    content = f"{XSS_SCRIPT} battery power bank\n\n{XSS_IMG} garden hose\n\nsomething else entirely"
    loaded, _, _, _ = generate.load_upload(write(tmp_path, "xss.txt", content), None)
    preview = generate.preview(loaded, "free", "battery power bank " + XSS_IMG, 2, "paper")
    assert "BM25 retrieved 2 of 3" in preview and "BM25 " in preview
    assert "<script>" not in preview and "<img" not in preview
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in preview


def test_retrieval_preview_without_history_or_input_and_in_the_clean_style(generate):
    assert "No history loaded" in generate.preview(None, "review", "hello", 3, "paper")
    assert "Type an input" in generate.preview(sample_history(), "review", "  ", 3, "paper")
    assert "Retrieval is off" in generate.preview(sample_history(), "review", "hello", 0, "paper")
    paper = generate.preview(sample_history(), "review", "power bank", 3, "paper")
    clean = generate.preview(sample_history(), "review", "power bank", 3, "clean")
    assert "Product: " in paper and "Product: " not in clean and "Write only the review itself" in clean
    assert "ss-box-error" in generate.preview(sample_history(), "review", "hello", 3, "fancy")


# --------------------------------------------------------------------------- pairings


def test_unavailable_pairings_are_marked_and_refused(generate, monkeypatch):
    from specsteer.models.registry import PAIRINGS, Pairing

    # No listed pairing is refused for its tokenizers any more (the offline cross pairings load); the
    # label for one that is still comes from the registry's flag.
    refused = Pairing(
        id="refused-cross",
        label="refused",
        specialist=PAIRINGS["offline-smollm2__gemma3"].specialist,
        generalist=PAIRINGS["offline-smollm2__gemma3"].generalist,
        cross_tokenizer=True,
    )
    monkeypatch.setitem(PAIRINGS, refused.id, refused)
    catalog = generate.service.pairs
    labels = dict((value, label) for label, value in pairs.pairing_choices(catalog))
    assert labels[pairs.TINY_PAIRING_ID] == pairs.TINY_LABEL
    assert labels["qwen3-0.6b__qwen3-32b"].endswith("(unavailable: no hub)")
    assert "(unavailable: different tokenizers)" in labels[refused.id]
    assert "(unavailable: different tokenizers)" not in labels["offline-smollm2__gemma3"]
    frames = run_generate(generate, sample_history(), pairing="qwen3-0.6b__qwen3-32b")
    assert all(str(frame.output) == str(gr.skip()) for frame in frames)  # nothing generated
    assert "ss-box-error" in frames[-1].status and "unavailable here" in frames[-1].status


def test_choosing_an_unavailable_pairing_warns_once_and_goes_back(generate, warnings):
    catalog = generate.service.pairs
    dropdown, note, runtime_note, remembered = pairs.pairing_selected(
        catalog, "qwen3-0.6b__qwen3-32b", pairs.TINY_PAIRING_ID
    )
    assert len(warnings) == 1 and "unavailable here" in warnings[0]
    assert dropdown == remembered == pairs.TINY_PAIRING_ID and "Tiny random pair" in note
    assert "transformers" in runtime_note
    dropdown, note, _, remembered = pairs.pairing_selected(catalog, "offline-qwen2.5-coder", pairs.TINY_PAIRING_ID)
    if catalog.status("offline-qwen2.5-coder")[0]:
        assert dropdown == gr.skip() and remembered == "offline-qwen2.5-coder"
    else:
        assert remembered == pairs.TINY_PAIRING_ID


# --------------------------------------------------------------------------- generation


def test_generation_streams_colours_and_saves(generate, app_database):
    frames = run_generate(generate, sample_history(), max_new_tokens=40)
    streaming = [frame for frame in frames if "ss-tok" in str(frame.output)]
    assert len(streaming) >= 3, "the output should arrive in several throttled frames"
    # the settled tokens are sent as appends; only the pending drafts' tail after them is replaced
    outputs = [re.sub(r'<span class="ss-tok ss-tok-pending".*', "", str(frame.output)) for frame in streaming]
    assert all(later.startswith(earlier) for earlier, later in zip(outputs, outputs[1:]))
    assert any("ss-tok-pending" in str(frame.output) for frame in streaming)  # drafts shown before their verdict
    assert "ss-tok-pending" not in frames[-1].output
    final = frames[-1]
    assert "saved as generation #" in final.status
    assert "ss-tok-" in final.output
    assert 'data-state="length"' in final.stats and "B</div>" in final.stats  # bytes known at the end
    assert "transformers · fp32" in final.stats and "first token" in final.stats and "prefix cache" in final.stats
    assert "Privacy check passed" in final.privacy and "uplink" not in final.privacy.split("Privacy check")[0]
    assert "No raw history text left the device" in final.privacy
    assert "↑ up" in final.privacy and "draft" in final.privacy
    generation = storage.list_generations()[0]
    assert generation["method"] == "specsteer" and generation["stats"]["new_tokens"] == 40
    assert generation["stats"]["runtime"] == "transformers" and generation["stats"]["precision"] == "fp32"
    stored = storage.get_generation(generation["id"])
    assert stored["transcript"] and stored["settings"]["runtime"] == "auto"
    assert stored["settings"]["prompt_style"] == "paper" and stored["settings"]["history"].startswith("sample")
    assert storage.list_histories()[0]["item_count"] == len(sample_history().history)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_from_the_ui(generate, method):
    frames = run_generate(generate, sample_history(), method=method, max_new_tokens=5)
    assert "saved as generation" in frames[-1].status, frames[-1].status
    if METHOD_INFO[method].device_only:
        assert "Nothing crossed the link" in frames[-1].privacy
    elif METHOD_INFO[method].sends_private_context:  # llm+: labelled as what it is, never as passed
        assert "Not private" in frames[-1].privacy and "whole private prompt" in frames[-1].privacy
        assert "Privacy check passed" not in frames[-1].privacy
    else:
        assert "Privacy check passed" in frames[-1].privacy


def test_a_persona_generation_counts_and_names_its_private_facts(generate):
    sample = DEFAULT_SAMPLE
    loaded = page.read_sample(sample)
    assert loaded.history.profile and page.PAGE_DEFAULTS.prompt_style == "clean"
    assert "Privacy_info" in generate_handlers.history_summary(loaded)
    task = SAMPLE_USERS[sample].input_text
    steered = run_generate(generate, loaded, task="cogenesis", input_text=task, max_new_tokens=6, prompt_style="clean")[
        -1
    ].privacy
    assert re.search(r"\d of 9 private facts were sent to the cloud", steered)
    assert "Works remotely on Fridays to spend more time with family and to meditate" in steered  # named in the task
    leaky = run_generate(
        generate, loaded, task="cogenesis", input_text=task, method="llm+", max_new_tokens=4, prompt_style="clean"
    )[-1].privacy
    assert "9 of 9 private facts were sent to the cloud" in leaky and "Not private" in leaky


def test_runtime_adaptive_draft_and_prompt_style_reach_the_saved_settings(generate):
    frames = run_generate(
        generate,
        sample_history(),
        adaptive_draft=True,
        draft_len=6,
        max_new_tokens=30,
        runtime="transformers",
        prompt_style="clean",
    )
    assert "saved as generation" in frames[-1].status
    stored = storage.get_generation(storage.list_generations()[0]["id"])["settings"]
    assert stored["adaptive_draft"] is True and stored["draft_len"] == 6
    assert stored["runtime"] == "transformers" and stored["prompt_style"] == "clean"
    assert "Write only the review itself" in frames[0].retrieved  # the preview of this generation's prompts


def test_sampling_with_a_seed_is_reproducible(generate):
    first = run_generate(generate, sample_history(), decoding="sampling", seed=7, max_new_tokens=12)[-1].output
    second = run_generate(generate, sample_history(), decoding="sampling", seed=7, max_new_tokens=12)[-1].output
    assert first == second


def test_generation_without_history_or_input(generate):
    frames = run_generate(generate, None, max_new_tokens=4)
    assert "saved as generation" in frames[-1].status
    frames = run_generate(generate, sample_history(), input_text="   ")
    assert "Enter a task input" in frames[-1].status


def test_invalid_settings_are_reported(generate):
    frames = run_generate(generate, sample_history(), draft_len=0, seed=None)
    # Problems come in stages: a value that cannot be read (the empty seed) first, alone; the engine's
    # ranges (the draft length) once every value reads.
    status = frames[-1].status
    assert "Seed needs a value." in status and "ss-box-error" in status and "Draft length" not in status
    frames = run_generate(generate, sample_history(), draft_len=0)
    assert "Draft length must be between 1 and 16." in frames[-1].status


def test_every_message_is_a_sentence(generate, dashboard, tmp_path):
    """Status messages end with a full stop, whichever layer wrote them."""
    statuses = [
        run_generate(generate, sample_history(), draft_len=0)[-1].status,
        run_generate(generate, sample_history(), input_text=" ")[-1].status,
        run_generate(generate, sample_history(), pairing="qwen3-0.6b__qwen3-32b")[-1].status,
        generate.load_upload(write(tmp_path, "bad.json", "[{"), None)[1],
        generate.load_upload(write(tmp_path, "h.pdf", b"%PDF"), None)[1],
        list(dashboard.run_batch(**dashboard_values(alphas="0.1, x")))[-1].status,
        list(dashboard.run_batch(**dashboard_values(betas="")))[-1].status,
        list(dashboard.run_batch(**dashboard_values(methods=[])))[-1].status,
        list(dashboard.run_batch(**dashboard_values(source="upload", upload=write(tmp_path, "x.jsonl", "{"))))[
            -1
        ].status,
    ]
    for status in statuses:
        text = status.split('<span>', 1)[1].split("</span>", 1)[0]
        assert text.endswith("."), text


def test_link_emulation_and_the_cloud_reach_the_stats_and_the_saved_settings(generate):
    frames = run_generate(generate, sample_history(), rtt_ms=10, uplink_kbps=5000, max_new_tokens=6)
    assert "saved as generation" in frames[-1].status
    assert ">inside this app<" in frames[-1].stats and "RTT 10 ms · up 5,000 kbps · down unlimited" in frames[-1].stats
    live = [frame.stats for frame in frames if 'data-state="running"' in str(frame.stats)]
    assert live and all("RTT 10 ms" in strip for strip in live)
    stored = storage.get_generation(storage.list_generations()[0]["id"])["settings"]
    assert (stored["cloud"], stored["rtt_ms"], stored["uplink_kbps"], stored["downlink_kbps"]) == ("", 10, 5000, 0)


def test_a_bad_or_absent_cloud_is_a_message_and_its_credentials_are_never_shown(generate):
    frames = run_generate(generate, sample_history(), cloud="http://alice:hunter2@cloud.example.org:8700")
    assert "must not carry a user name or password" in frames[-1].status and "hunter2" not in str(frames)
    address = f"http://127.0.0.1:{free_loopback_port()}"
    frames = run_generate(generate, sample_history(), cloud=address)
    assert f"Lost the connection to the Cloud at {address}" in frames[-1].status
    assert "ss-box-error" in frames[-1].status and storage.list_generations() == []
    checked = generate.test_cloud(address + "/", pairs.TINY_PAIRING_ID)
    assert "ss-box-error" in checked and f"Cloud at {address}" in checked
    assert "inside this app" in generate.test_cloud("", pairs.TINY_PAIRING_ID)
    assert "hunter2" not in generate.test_cloud("http://alice:hunter2@x.example.org", pairs.TINY_PAIRING_ID)


def test_the_setting_starts_from_the_environment_unless_it_is_unusable(monkeypatch):
    monkeypatch.setenv(CLOUD_URL_ENV, "HTTP://Cloud.example.org:8700/")
    assert page.environment_cloud() == ("http://cloud.example.org:8700", None)
    monkeypatch.setenv(CLOUD_URL_ENV, "http://alice:hunter2@cloud.example.org:8700")
    address, problem = page.environment_cloud()
    assert address == "" and f"${CLOUD_URL_ENV} is not used" in problem and "hunter2" not in problem
    assert problem.endswith("The Cloud runs inside this app.")
    monkeypatch.delenv(CLOUD_URL_ENV)
    assert page.environment_cloud() == ("", None)


def test_what_a_cloud_serves_is_shown_escaped():
    info = CloudInfo(
        "<b>tiny</b>",
        320,
        instance="<img src=x>",
        runtime="transformers",
        limits={"max_sessions": 12, "max_new_tokens": 1024, "idle_timeout_s": 300.0, "max_frame_bytes": 9},
    )
    shown = render.cloud_check_html(CloudCheck("http://127.0.0.1:8700", True, "It answers <i>fine</i>.", info))
    assert "<b>" not in shown and "<img" not in shown and "<i>" not in shown
    assert "&lt;b&gt;tiny&lt;/b&gt;" in shown and "&lt;img src=x&gt;" in shown
    assert '<div class="ss-stat-name">sessions at once</div><div class="ss-stat-value">12</div>' in shown
    assert '<div class="ss-stat-name">new tokens</div><div class="ss-stat-value">1,024</div>' in shown
    assert '<div class="ss-stat-value">300 s</div>' in shown and "frame" not in shown and "ss-box-ok" in shown


def test_a_cloud_failing_midway_keeps_the_output_stats_and_transcript(service):
    """The service's Failed with a partial result (what a killed Cloud leaves, see test_service): the page
    keeps the tokens shown, the final stats with the stop reason, and the transcript with its audit."""
    events = list(service.generate(sample_history(), **TASK_INPUT, settings=settings(max_new_tokens=12)))
    started, done = events[0], events[-1]
    assert isinstance(started, Started) and isinstance(done, Done)
    stats = replace(done.result.finished.stats, stop_reason="cloud-error")
    partial = replace(done.result, finished=replace(done.result.finished, stats=stats))
    failed = Failed(
        "Lost the connection to the Cloud at http://127.0.0.1:1 (refused). The 12 tokens generated "
        "before it failed are kept and saved as generation #1.",
        partial,
    )
    remote = replace(started.settings, cloud="http://127.0.0.1:1")
    replay = [replace(started, settings=remote), *(e for e in events if isinstance(e, (Generating, Token))), failed]
    last = list(generate_handlers.generation_frames(replay))[-1]
    assert "ss-box-error" in last.status and "kept and saved as generation #1" in last.status
    assert last.output.count('class="ss-tok ') == sum(1 for token in done.result.tokens if token.text)
    assert 'data-state="cloud-error"' in last.stats and ">http://127.0.0.1:1<" in last.stats
    assert "Privacy check passed" in last.privacy


def test_stop_ends_the_generation_and_shows_where_it_ended(generate):
    request = SimpleNamespace(session_hash="session-stop")
    stream = generate.generate(sample_history(), **TASK_INPUT, **settings(max_new_tokens=1000), request=request)
    stopped = None
    for frame in stream:  # as the page would, until Stop abandons the stream
        if re.search(r"ss-tok-(?!pending)", str(frame.output)):  # a settled token, not only drafts
            stopped = generate.stop(request)
            break
    assert stopped is not None
    assert "Stopped" in stopped.status and "saved as generation" in stopped.status
    assert 'data-state="cancelled"' in stopped.stats and "ss-tok" in stopped.output
    assert "Privacy check passed" in stopped.privacy
    generation = storage.list_generations()[0]
    assert generation["stats"]["stop_reason"] == "cancelled" and generation["stats"]["new_tokens"] < 1000
    elsewhere = generate.stop(SimpleNamespace(session_hash="other")).status  # another page claims nothing
    assert "Nothing of yours is running" in elsewhere and "Stopped" not in elsewhere


def test_script_in_history_and_input_is_escaped_everywhere(generate, tmp_path):
    loaded, _, _, _ = generate.load_upload(write(tmp_path, "xss.txt", f"{XSS_SCRIPT}\n\n{XSS_IMG}"), None)
    frames = run_generate(generate, loaded, task="free", input_text=f"{XSS_SCRIPT} {XSS_IMG}", max_new_tokens=6)
    for frame in frames:
        for value in frame:
            text = str(value)
            assert "<script" not in text and "<img" not in text


# --------------------------------------------------------------------------- comparison and annotation


PAGE, OTHER_PAGE = SimpleNamespace(session_hash="page-1"), SimpleNamespace(session_hash="page-2")


def frame_of(view):
    """The compare handlers' outputs, by name (they return compare_handlers.CompareView)."""
    assert isinstance(view, compare_handlers.CompareView)
    return view


def run_compare(tab, methods=("slm+", "llm", "specsteer"), blind=True, request=None, **overrides):
    return [
        frame_of(frame)
        for frame in tab.compare(
            sample_history(),
            **TASK_INPUT,
            methods=list(methods),
            blind=blind,
            request=request,
            **settings(max_new_tokens=10, **overrides),
        )
    ]


def test_comparison_annotation_reveal_export_and_agreement(compare):
    frames = run_compare(compare)
    final = frames[-1]
    view = final.view
    assert isinstance(view, judging.ComparisonView) and sorted(view.order) == ["llm", "slm+", "specsteer"]
    assert "Saved as comparison" in final.status
    assert [update["visible"] for update in frames[0].visible] == [True] * 3 + [False] * (
        compare_handlers.MAX_SLOTS - 3
    )
    for slot in final.slots[:3]:  # blind: labels only
        assert "Output" in slot and "SpecSteer" not in slot and "SLM+" not in slot

    ratings = [4, 5, 2, 3, 3, 3] + [None] * (2 * compare_handlers.MAX_SLOTS - 6)
    assert final.submit["interactive"] is True  # saved: ready to be judged
    status, revealed, slots, table, agreement, submit = compare.submit_annotation(
        PAGE, view, "ann-1", "A", "A reads like the user", *ratings
    )
    assert "Saved annotation" in status and revealed.revealed
    assert submit["interactive"] is False  # judged: Submit is off until another comparison is shown
    assert method_label(view.order[0]) in slots[0] and "tok/s" in slots[0]  # revealed after the judgement
    assert any(row[0] == method_label(view.order[0]) and row[2] == 1 for row in table)
    assert "no comparison has been judged from two page sessions" in agreement and "Unverified" in agreement
    again = compare.submit_annotation(PAGE, revealed, "ann-1", "B", "", *ratings)
    assert "already saved" in again[0]

    reopened = frame_of(compare.open_comparison(view.comparison_id))
    assert reopened.view.comparison_id == view.comparison_id and not reopened.view.revealed
    assert reopened.submit["interactive"] is True
    second = reopened.view
    preferred_label = "ABC"[second.order.index(view.order[0])]  # agrees with the first annotator
    status, *_rest = compare.submit_annotation(OTHER_PAGE, second, "ann-2", preferred_label, "", *ratings)
    assert "Saved annotation" in status
    rows, agreement = compare.summary_table()
    assert "1 comparison(s) judged from two or more page sessions" in agreement
    assert "pairwise agreement 100%" in agreement

    csv_file, message = compare.export_annotations("csv")
    assert "Exported 2" in message and csv_file["visible"]
    assert open(csv_file["value"]).read().count("\n") == 3
    jsonl_file, _ = compare.export_annotations("jsonl")
    jsonl_path = jsonl_file["value"]
    lines = [json.loads(line) for line in open(jsonl_path)]
    assert {line["annotator"] for line in lines} == {"ann-1", "ann-2"}
    assert lines[0]["preferred_method"] == view.order[0]
    stored = storage.get_comparison(view.comparison_id)["settings"]
    assert stored["methods"] == view.order and "method" not in stored and stored["runtime"] == "auto"


def test_one_page_judging_under_eight_names_counts_as_one_judge(compare):
    """A page (one session) that judges one comparison eight times under eight names holds one judgement: each
    re-submit replaces the last, and neither the counts nor the agreement count eight people."""
    view = run_compare(compare)[-1].view
    none = [None] * (2 * compare_handlers.MAX_SLOTS)
    statuses = []
    for number in range(8):
        opened = frame_of(compare.open_comparison(view.comparison_id)).view
        status, _revealed, _slots, table, agreement, _submit = compare.submit_annotation(
            PAGE, opened, f"person-{number}", "ABC"[number % 3], "", *none
        )
        statuses.append(status)
    assert "replaces this page" not in statuses[0] and all("replaces this page" in s for s in statuses[1:])
    assert "1 judgement(s) from 1 page session(s), under 1 name(s)" in agreement
    assert "no comparison has been judged from two page sessions" in agreement and "κ" not in agreement
    assert sum(row[2] for row in table) == 1  # one judgement's win
    assert {row[1] for row in table} == {1}  # each method shown once: one judgement
    assert [j.annotator for j in storage.list_annotations()] == ["person-7"]
    file, message = compare.export_annotations("csv")
    assert "Exported 1" in message

    opened = frame_of(compare.open_comparison(view.comparison_id)).view
    compare.submit_annotation(OTHER_PAGE, opened, "person-7", "A", "", *none)
    _rows, agreement = compare.summary_table()
    assert "2 judgement(s) from 2 page session(s), under 1 name(s)" in agreement
    assert "1 comparison(s) judged from two or more page sessions" in agreement


def test_comparison_not_blind_shows_names_in_method_order(compare):
    final = run_compare(compare, methods=("specsteer", "slm"), blind=False)[-1]
    assert final.view.order == ["slm", "specsteer"]
    assert "SLM" in final.slots[0] and "SpecSteer" in final.slots[1]


def test_annotation_needs_name_and_choice_and_a_comparison(compare):
    final = run_compare(compare, methods=("slm",))[-1]
    none = [None] * (2 * compare_handlers.MAX_SLOTS)
    assert "Enter your name" in compare.submit_annotation(PAGE, final.view, " ", "A", "", *none)[0]
    assert "Pick the output" in compare.submit_annotation(PAGE, final.view, "x", None, "", *none)[0]
    assert "Run a comparison" in compare.submit_annotation(PAGE, None, "x", "A", "", *none)[0]
    assert "came from none" in compare.submit_annotation(None, final.view, "x", "A", "", *none)[0]
    assert "Choose at least one method" in run_compare(compare, methods=())[-1].status
    assert "nothing to export" in compare.export_annotations("csv")[1]


def test_compare_refuses_by_name_what_it_does_not_judge(compare):
    """An API caller may send llm+ or any text as a method: the answer names it (escaped) and saves nothing,
    instead of comparing the rest as if it had not been asked for."""
    before = len(compare.service.saved_comparisons())
    final = run_compare(compare, methods=("slm", "llm+", "<b>x</b>"))[-1]
    assert "llm+" in final.status and "&lt;b&gt;x&lt;/b&gt;" in final.status and "<b>x" not in final.status
    assert "Generate tab" in final.status
    assert len(compare.service.saved_comparisons()) == before


def test_comparison_stop_does_not_save(compare):
    request = SimpleNamespace(session_hash="session-compare")
    stopped = None
    for frame in compare.compare(
        sample_history(),
        **TASK_INPUT,
        methods=["slm", "llm"],
        blind=True,
        request=request,
        **settings(max_new_tokens=1000),
    ):
        if "generating…" in " ".join(map(str, frame_of(frame).slots)):
            stopped = frame_of(compare.stop(request))
            break
    assert stopped is not None and "not saved" in stopped.status
    assert storage.list_comparisons() == []


# --------------------------------------------------------------------------- dashboard


def dashboard_values(**overrides):
    values = dict(
        source="sample",
        upload=None,
        task="review",
        records=1,
        methods=["llm", "specsteer"],
        alphas="1.0, 0.1",
        betas="1",
        pairing=pairs.TINY_PAIRING_ID,
        runtime="auto",
        max_new_tokens=4,
        draft_len=2,
        run_name="",
    )
    values.update(overrides)
    return values


def test_dashboard_run_shows_figures_table_and_survives_restart(dashboard):
    frames = list(dashboard.run_batch(**dashboard_values(run_name="ui-test-run")))
    assert any("ss-progress" in str(frame.status) for frame in frames)
    final = frames[-1]
    assert "finished" in final.status and "3 cells computed" in final.status
    assert final.quality["value"].data and final.acceptance["value"].data
    assert list(final.table["value"]["method"]) == ["LLM", "SpecSteer", "SpecSteer"]
    storage.reset_engines()  # as after an app restart
    choices = own_runs(dashboard)
    assert len(choices) == 1 and "ui-test-run" in choices[0][0] and "3/3 cells" in choices[0][0]
    view = dashboard.open_runs([choices[0][1]])
    assert "Showing #" in view.status and len(view.table["value"]) == 3
    # Every cell was audited for the history that crossed: the per-method share and phrases per generation.
    assert "history crossed" in set(view.table["value"].columns)
    again = list(dashboard.run_batch(**dashboard_values(run_name="ui-test-run")))[-1]
    assert "0 cells computed now, 3 stored" in again.status  # resumed: nothing left to do


def test_dashboard_compares_runs_and_shows_their_names_as_text(dashboard):
    first = list(dashboard.run_batch(**dashboard_values(run_name="<b>one</b>")))[-1]
    second = list(dashboard.run_batch(**dashboard_values(run_name='<a href="x">two</a>', methods=["slm+"])))[-1]
    assert "finished" in first.status and "finished" in second.status
    ids = [run_id for _, run_id in own_runs(dashboard)]
    view = dashboard.open_runs(ids)
    table = view.table["value"]
    assert set(table["run"]) == {f'#{ids[0]} <a href="x">two</a>', f"#{ids[1]} <b>one</b>"}
    widths = dict(zip(table.columns, view.table["column_widths"], strict=True))
    assert widths["run"] == "200px" and widths["acceptance"] == "109px"  # a header word's width, never less
    quality, acceptance = view.quality["value"], view.acceptance["value"]
    names = [trace.name for figure in (quality, acceptance) for trace in figure.data]
    assert names and all("<" not in name for name in names)  # plotly would render <b> and <a> as markup
    assert any(name.startswith(f"#{ids[1]} &lt;b&gt;one&lt;/b&gt;: ") for name in names)
    assert "<" not in str(quality.layout.title.text)
    assert quality.layout.legend.orientation == "h"  # long run names go under the plot, not beside it


def test_dashboard_cancel_keeps_finished_cells(dashboard):
    request = SimpleNamespace(session_hash="session-dashboard")
    values = dashboard_values(records=3, max_new_tokens=200, methods=["slm", "llm"], run_name="to-cancel")
    cancelled = None
    for frame in dashboard.run_batch(**values, request=request):
        if "ss-progress" in str(frame.status) and "on record" in str(frame.status):
            cancelled = dashboard.cancel(request)
            break
    assert cancelled is not None and "cancelled" in cancelled.status and "same name to resume" in cancelled.status
    run = storage.get_run_by_name("to-cancel")
    assert run.status == "cancelled" and run.cell_count < 6


def test_dashboard_input_errors_are_messages(dashboard, tmp_path):
    assert "not a number" in list(dashboard.run_batch(**dashboard_values(alphas="0.1, x")))[-1].status
    assert "Upload a LongLaMP" in list(dashboard.run_batch(**dashboard_values(source="upload")))[-1].status
    bad = write(tmp_path, "bad.jsonl", '{"input": "x"}\n')
    status = list(dashboard.run_batch(**dashboard_values(source="upload", upload=bad)))[-1].status
    assert "ss-box-error" in status and "Traceback" not in status
    assert "Choose one or more" in dashboard.open_runs([]).status


def test_dashboard_upload_errors_name_the_users_file_and_leave_nothing_behind(dashboard, tmp_path):
    uploads = dashboard.service.uploads
    bad = write(tmp_path, "my-reviews.jsonl", '{"input": "x", "output": "y"}\n{"input": \n')
    status = list(dashboard.run_batch(**dashboard_values(source="upload", upload=bad)))[-1].status
    assert "my-reviews.jsonl" in status and "ss-box-error" in status
    assert not uploads.exists() or not any(uploads.rglob("*")), "a rejected upload stayed in data/uploads"


def test_dashboard_upload_is_copied_into_the_data_folder(dashboard, tmp_path):
    records = bundled_sample_path("review").read_text()
    upload = write(tmp_path, "mine.jsonl", records)
    final = list(dashboard.run_batch(**dashboard_values(source="upload", upload=upload, methods=["slm"])))[-1]
    assert "finished" in final.status
    config = storage.list_runs()[0].config
    assert "uploads" in config["data"] and config["data"].endswith("mine.jsonl")


def test_a_run_hands_gradio_copies_of_its_update_dicts():
    """Gradio pops "value" out of an update dict as it sends it; the final state, sent again at the end
    of the stream, must still carry every value (an API client reads the last frame)."""

    def produce(flag):
        yield (gr.update(value="table", column_widths=["10px"]),)

    run = BackgroundRun(produce, width=1, name="test")
    sent = []
    for (update,) in run.frames():
        sent.append(dict(update))
        update.pop("value", None)  # what Gradio's postprocessing does to the dict it is given
    assert [frame["value"] for frame in sent] == ["table", "table"]
    assert run.state[0]["value"] == "table"


# --------------------------------------------------------------------------- the Deployment view


def test_the_deployment_view_projects_a_run_with_labels_table_and_escaped_names(dashboard):
    name = '<b>deploy</b> <img src=x onerror="window.__pwned=1">'
    final = list(
        dashboard.run_batch(
            **dashboard_values(run_name=name, methods=["slm+", "llm", "specsteer"], alphas="1.0, 0.1", max_new_tokens=6)
        )
    )[-1]
    assert "finished" in final.status
    run_id = dashboard.run_choices()[0][1]
    view = dashboard.deployment([run_id], "phone-4g")
    profile = PROFILES["phone-4g"]
    assert "ss-box-ok" in view.status and "<b>" not in view.status and "&lt;b&gt;deploy&lt;/b&gt;" in view.status
    assert "Projected 4 traced generations" in view.status and esc(profile.label) in view.status
    figure = view.figure["value"]
    title = figure.layout.title.text
    assert "a projection, not a measurement" in title and "<b>" not in title and "&lt;b&gt;deploy" in title
    assert figure.layout.xaxis.title.text.startswith("round-trip time")
    assert figure.layout.yaxis.title.text == "projected tokens / s"
    assert any("A projection, not a measurement" in note.text for note in figure.layout.annotations)
    lines = [trace for trace in figure.data if trace.type == "scatter"]
    assert [trace.name for trace in lines] == ["SLM+", "LLM", "SpecSteer α=1 β=1", "SpecSteer α=0.1 β=1"]
    assert all(list(trace.x) == [float(rtt) for rtt in range(0, 201, 10)] for trace in lines)
    bars = [trace for trace in figure.data if trace.type == "bar"]
    assert [list(bar.y) for bar in bars] == [["SLM+"], ["LLM"], ["SpecSteer α=1 β=1"], ["SpecSteer α=0.1 β=1"]]
    table = view.table["value"]
    assert list(table.columns) == [
        "RTT (ms)",
        "LLM (tok/s)",
        "SpecSteer α=1 β=1 (tok/s)",
        "SpecSteer α=1 β=1 speedup",
        "SpecSteer α=0.1 β=1 (tok/s)",
        "SpecSteer α=0.1 β=1 speedup",
    ]
    assert list(table["RTT (ms)"]) == ["0", "10", "20", "50", "100", "150", "200"]
    llm = {int(x): y for x, y in zip(lines[1].x, lines[1].y)}
    steer = {int(x): y for x, y in zip(lines[3].x, lines[3].y)}
    for rtt, cell in zip(table["RTT (ms)"], table["SpecSteer α=0.1 β=1 speedup"]):
        assert cell == f"{steer[int(rtt)] / llm[int(rtt)]:.2f}×"
    assert steer[200] < steer[0]  # a round trip per round costs more as the RTT grows
    assert profile.label in view.profile and "Opensignal" in view.profile
    paper = dashboard.deployment([run_id], "paper")
    assert esc(PROFILES["paper"].label) in paper.status and "no network" in paper.profile


def test_the_deployment_view_says_why_it_has_nothing_to_show(dashboard):
    run_id = storage.create_run("<i>old</i> run", {"task": "review"})
    for record, method in (("r1", "llm"), ("r2", "specsteer")):
        storage.save_cell(
            run_id,
            CellResult(
                record,
                GridPoint(method, 0.1 if method == "specsteer" else None, None),
                "text",
                {},
                GenerationStats(method, new_tokens=5, seconds=1.0),
            ),
        )
    old = dashboard.deployment([run_id], "phone-4g")
    assert "stored before generations kept their traces" in old.status and "none of its 2 cells" in old.status
    assert "&lt;i&gt;old&lt;/i&gt;" in old.status and "<i>" not in old.status
    assert old.figure["visible"] is False and old.table["visible"] is False and "Opensignal" in old.profile
    empty = storage.create_run("empty run", {"task": "review"})
    assert "no finished cells yet" in dashboard.deployment([empty], "phone-4g").status
    assert "Choose a stored run" in dashboard.deployment([], "phone-4g").status
    assert "Run #999 does not exist." in dashboard.deployment(["999"], "phone-4g").status
    unknown = dashboard.deployment([run_id], "mars-link")
    assert "ss-box-error" in unknown.status and "Unknown deployment profile &#x27;mars-link&#x27;" in unknown.status
    alone = list(dashboard.run_batch(**dashboard_values(run_name="slm alone", methods=["slm+"])))[-1]
    assert "finished" in alone.status
    view = dashboard.deployment([dashboard.run_choices()[0][1]], "laptop-wifi")
    assert "no LLM cells" in view.status and list(view.table["value"].columns) == ["RTT (ms)"]


def test_a_profile_and_its_sources_are_shown_escaped():
    profile = replace(PROFILES["paper"], label="<script>window.__pwned=1</script>")
    shown = render.profile_html(profile)
    assert "<script" not in shown and "&lt;script&gt;" in shown
    assert all(esc(source.text) in shown for source in profile.sources)


# --------------------------------------------------------------------------- public callers


def test_a_server_path_is_never_read_as_a_history(service, tmp_path, warnings):
    from ui.uploads import received_upload

    folder = tmp_path / "gradio-uploads"
    (folder / "abc123").mkdir(parents=True)
    (folder / "def456").mkdir()
    uploaded = write(folder / "abc123", "mine.txt", "I hike.\n\nI swim.")
    secret = write(tmp_path, "secret_notes.txt", "API_TOKEN=hunter2\n\nmore notes")
    copied = write(folder / "def456", "secret_notes.txt", "API_TOKEN=hunter2\n\nmore notes")  # Gradio's copy
    (folder / "abc123" / "link.txt").symlink_to(secret)
    tab = generate_handlers.GenerateTab(service, lambda path: received_upload(path, {uploaded}, str(folder)))
    loaded, _summary, _task, _sample = tab.load_upload(uploaded, None)
    assert len(loaded.history) == 2
    for path in (secret, copied, str(folder / "abc123" / "link.txt"), "/etc/passwd"):
        state, summary, task, _ = tab.load_upload(path, sample_history())
        assert state == gr.skip() and task == gr.skip()
        assert "was not uploaded to the app" in summary and "hunter2" not in summary


def test_the_dashboard_never_reads_a_server_path_as_records(service, tmp_path):
    planted = write(tmp_path, "records.jsonl", '{"input": "x", "output": "y", "profile": []}\n')
    tab = dashboard_handlers.DashboardTab(service, lambda path: False)
    frames = list(
        tab.run_batch(
            **dashboard_values(source="upload", upload=planted, methods=["llm"], alphas="0.1", run_name="probe")
        )
    )
    assert len(frames) == 1 and "was not uploaded to the app" in frames[0].status


def test_in_public_only_the_operators_token_exports_the_annotations(service, compare):
    from specsteer.protocol.exposure import Exposure
    from specsteer.service.app_service import AppService

    def served_in_public(exposure: Exposure) -> compare_handlers.CompareTab:  # the same stores, the app in public
        return compare_handlers.CompareTab(AppService(service.store, service.runs, service.pairs, exposure=exposure))

    final = run_compare(compare, methods=("slm",))[-1]
    none = [None] * (2 * compare_handlers.MAX_SLOTS)
    assert "Saved annotation" in compare.submit_annotation(PAGE, final.view, "visitor-7", "A", "private note", *none)[0]
    public = served_in_public(Exposure(public=True, admin_token="operator-token"))
    for token in ("", "guess", "operator-token "):
        file, message = public.export_annotations("csv", token)
        assert file["value"] is None and "needs the operator&#x27;s token" in message
    file, message = public.export_annotations("csv", "operator-token")
    assert "Exported 1" in message and "visitor-7" in Path(file["value"]).read_text()
    file, message = served_in_public(Exposure(public=True)).export_annotations("jsonl", "anything")
    assert file["value"] is None and "No token is configured ($SPECSTEER_ADMIN_TOKEN)" in message
