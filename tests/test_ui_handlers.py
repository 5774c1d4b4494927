"""The UI's handlers called as plain functions (no server): tiny random models, a temporary database."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import storage
from specsteer.data import bundled_sample_path
from specsteer.methods import METHOD_INFO, METHODS, method_label
from specsteer.events import TokenEvent
from specsteer.history import MAX_UPLOAD_BYTES
from ui import compare_tab, dashboard_tab, generate_tab, pairs, render
from ui.streaming import BackgroundRun, Throttle, merge_frames

XSS_SCRIPT = "<script>window.__pwned=1</script>"
XSS_IMG = '<img src=x onerror="window.__pwned=1">'


@pytest.fixture(autouse=True)
def app_env(tmp_path, monkeypatch):
    """Each test: the tiny test pair, its own database, and no model hub."""
    monkeypatch.setenv(pairs.TEST_PAIR_ENV, "tiny")
    monkeypatch.setenv("SPECSTEER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    storage.reset_engines()
    yield
    storage.reset_engines()


def settings(**overrides):
    """The Generate tab's widget values for a short greedy SpecSteer run on the tiny pair."""
    values = dict(task="review", input_text="Write a review of a power bank with great battery life",
                  pairing_id=pairs.TINY_PAIRING_ID, method="specsteer", alpha=0.1, beta=1.0, draft_len=4,
                  max_new_tokens=24, decoding="greedy", seed=0, temperature=1.0, top_p=1.0, retrieval_k=3,
                  downlink_top_k=64, exact=False, adaptive_draft=False)
    values.update(overrides)
    return values


def run_generate(loaded, **overrides):
    return list(generate_tab.generate_stream(loaded, **settings(**overrides)))


def sample_history():
    return generate_tab.read_sample("review")


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


# --------------------------------------------------------------------------- rendering


def test_everything_rendered_from_text_is_escaped():
    event = TokenEvent(id=5, text=XSS_IMG + "\x15", kind="accepted", round=1, ratio=0.5)
    span = render.token_span(event)
    assert "<img" not in span and "&lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt;" in span
    assert "\u2415" in span  # a control character shown as its control picture
    assert "ss-tok-accepted" in span
    box = render.message_box(XSS_SCRIPT, "error")
    assert "<script>" not in box and "&lt;script&gt;" in box
    slot = render.comparison_slot_html("A", XSS_SCRIPT, "specsteer", {"new_tokens": 3, "tok_per_s": 1.0})
    assert "<script>" not in slot


def test_rejected_drafts_are_struck_and_whitespace_stays_visible():
    span = render.token_span(TokenEvent(id=1, text=" \n", kind="rejected", round=2))
    assert span.startswith("<del") and "\u2423" in span and "\u21b5" in span


def test_token_html_only_grows_at_its_end():
    stream = render.TokenHtml()
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


def test_background_run_merges_frames_without_losing_updates():
    skip = generate_tab.gr.skip()
    assert merge_frames(("a", "b"), (skip, "c")) == ("a", "c")

    def produce(flag):
        yield ("status 1", "retrieved", skip)
        for number in range(50):
            yield (skip, skip, f"output {number}")
        yield ("done", skip, skip)

    run = BackgroundRun(produce, width=3, name="test")
    frames = list(run.frames(min_interval=0.01))
    assert merge_frames(*frames[:2]) if len(frames) > 1 else True
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


# --------------------------------------------------------------------------- history


def test_sample_users_load_with_their_task_and_input():
    for sample in generate_tab.SAMPLES:
        loaded, summary, task, text = generate_tab.load_sample(sample)
        assert len(loaded.history) > 0
        assert f"Read {len(loaded.history)} item" in summary
        assert task in ("review", "writing", "abstract", "free") and text


def test_upload_formats_are_read(tmp_path):
    items = [{"summary": "Great battery", "reviewText": "Lasts two days.", "overall": "5.0"},
             {"summary": "Meh", "reviewText": "Broke after a week.", "overall": "2.0"}]
    files = {
        "h.json": json.dumps(items),
        "h.jsonl": "\n".join(json.dumps(item) for item in items),
        "h.csv": "summary,reviewText,overall\nGreat battery,Lasts two days.,5.0\nMeh,Broke after a week.,2.0\n",
        "h.txt": "First paragraph.\n\nSecond paragraph.\n\nThird.",
    }
    for name, content in files.items():
        loaded, summary, task = generate_tab.load_upload(write(tmp_path, name, content), None)
        assert "Read" in summary and name in summary
        assert len(loaded.history) == (3 if name.endswith(".txt") else 2)
        assert task == ("free" if name.endswith(".txt") else "review")


def test_malformed_upload_gives_a_clear_message_and_keeps_the_history(tmp_path):
    current = sample_history()
    state, summary, task = generate_tab.load_upload(write(tmp_path, "bad.json", '[{"summary": "x",'), current)
    assert state == generate_tab.gr.skip() and task == generate_tab.gr.skip()
    assert "ss-box-error" in summary and "malformed JSON" in summary and "line 1" in summary
    assert "Traceback" not in summary and "Still using" in summary


def test_oversized_upload_is_refused(tmp_path):
    path = write(tmp_path, "big.txt", b"a" * (MAX_UPLOAD_BYTES + 1))
    _, summary, _ = generate_tab.load_upload(path, None)
    assert "limit is 5 MB" in summary


def test_unsupported_file_type_is_refused(tmp_path):
    _, summary, _ = generate_tab.load_upload(write(tmp_path, "history.pdf", b"%PDF"), None)
    assert "unsupported file type" in summary


def test_retrieval_preview_shows_scored_items_escaped(tmp_path):
    content = f"{XSS_SCRIPT} battery power bank\n\n{XSS_IMG} garden hose\n\nsomething else entirely"
    loaded, _, _ = generate_tab.load_upload(write(tmp_path, "xss.txt", content), None)
    preview = generate_tab.retrieval_preview(loaded, "free", "battery power bank " + XSS_IMG, 2)
    assert "BM25 retrieved 2 of 3" in preview and "BM25 " in preview
    assert "<script>" not in preview and "<img" not in preview
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in preview


def test_retrieval_preview_without_history_or_input():
    assert "No history loaded" in generate_tab.retrieval_preview(None, "review", "hello", 3)
    assert "Type an input" in generate_tab.retrieval_preview(sample_history(), "review", "  ", 3)


# --------------------------------------------------------------------------- pairings


def test_unavailable_pairings_are_marked_and_refused():
    labels = dict((value, label) for label, value in pairs.pairing_choices())
    assert labels[pairs.TINY_PAIRING_ID] == pairs.TINY_LABEL
    assert labels["qwen3-0.6b__qwen3-32b"].endswith("(unavailable: no hub)")
    assert "(unavailable: different tokenizers)" in labels["offline-smollm2__gemma3"]
    frames = run_generate(sample_history(), pairing_id="qwen3-0.6b__qwen3-32b")
    assert all(str(frame.output) == str(generate_tab.gr.skip()) for frame in frames)  # nothing generated
    assert "ss-box-error" in frames[-1].status and "unavailable here" in frames[-1].status


# --------------------------------------------------------------------------- generation


def test_generation_streams_colours_and_saves():
    frames = run_generate(sample_history(), max_new_tokens=40)
    streaming = [frame for frame in frames if "ss-tok" in str(frame.output)]
    assert len(streaming) >= 3, "the output should arrive in several throttled frames"
    outputs = [str(frame.output) for frame in streaming]
    assert all(later.startswith(earlier) for earlier, later in zip(outputs, outputs[1:]))  # sent as appends
    final = frames[-1]
    assert "saved as generation #" in final.status
    assert "ss-tok-" in final.output
    assert 'data-state="length"' in final.stats and "B</div>" in final.stats  # bytes known at the end
    assert "Privacy check passed" in final.privacy and "uplink" not in final.privacy.split("Privacy check")[0]
    assert "↑ up" in final.privacy and "draft" in final.privacy
    generation = storage.list_generations()[0]
    assert generation["method"] == "specsteer" and generation["stats"]["new_tokens"] == 40
    assert storage.get_generation(generation["id"])["transcript"]
    assert storage.list_histories()[0]["item_count"] == len(sample_history().history)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_from_the_ui(method):
    frames = run_generate(sample_history(), method=method, max_new_tokens=5)
    assert "saved as generation" in frames[-1].status, frames[-1].status
    if METHOD_INFO[method].device_only:
        assert "Nothing crossed the link" in frames[-1].privacy
    else:
        assert "Privacy check passed" in frames[-1].privacy


def test_adaptive_draft_length_reaches_the_engine_and_the_saved_settings():
    frames = run_generate(sample_history(), adaptive_draft=True, draft_len=6, max_new_tokens=30)
    assert "saved as generation" in frames[-1].status
    generation = storage.get_generation(storage.list_generations()[0]["id"])
    assert generation["settings"]["adaptive_draft"] is True and generation["settings"]["draft_len"] == 6


def test_sampling_with_a_seed_is_reproducible():
    first = run_generate(sample_history(), decoding="sampling", seed=7, max_new_tokens=12)[-1].output
    second = run_generate(sample_history(), decoding="sampling", seed=7, max_new_tokens=12)[-1].output
    assert first == second


def test_generation_without_history_or_input():
    frames = run_generate(None, max_new_tokens=4)
    assert "saved as generation" in frames[-1].status
    frames = run_generate(sample_history(), input_text="   ")
    assert "Enter a task input" in frames[-1].status


def test_invalid_settings_are_reported():
    frames = run_generate(sample_history(), draft_len=0)
    assert "draft length" in frames[-1].status and "ss-box-error" in frames[-1].status


def test_stop_ends_the_generation_and_shows_where_it_ended():
    request = SimpleNamespace(session_hash="session-stop")
    stream = generate_tab.generate_stream(sample_history(), **settings(max_new_tokens=1000), request=request)
    stopped = None
    for frame in stream:  # as the page would, until Stop abandons the stream
        if "ss-tok" in str(frame.output):
            stopped = generate_tab.stop_generation(request)
            break
    assert stopped is not None
    assert "Stopped" in stopped.status and "saved as generation" in stopped.status
    assert 'data-state="cancelled"' in stopped.stats and "ss-tok" in stopped.output
    assert "Privacy check passed" in stopped.privacy or "Stopped mid-round" in stopped.privacy
    generation = storage.list_generations()[0]
    assert generation["stats"]["stop_reason"] == "cancelled" and generation["stats"]["new_tokens"] < 1000
    assert generate_tab.stop_generation(SimpleNamespace(session_hash="other")).status.count("Stopped.") == 1


def test_script_in_history_and_input_is_escaped_everywhere(tmp_path):
    loaded, _, _ = generate_tab.load_upload(write(tmp_path, "xss.txt", f"{XSS_SCRIPT}\n\n{XSS_IMG}"), None)
    frames = run_generate(loaded, task="free", input_text=f"{XSS_SCRIPT} {XSS_IMG}", max_new_tokens=6)
    for frame in frames:
        for value in frame:
            text = str(value)
            assert "<script" not in text and "<img" not in text


# --------------------------------------------------------------------------- comparison and annotation


def frame_of(values):
    """Names for the compare events' output tuple."""
    slots = values[4:4 + compare_tab.MAX_SLOTS]
    visible = values[4 + compare_tab.MAX_SLOTS:4 + 2 * compare_tab.MAX_SLOTS]
    return SimpleNamespace(status=values[0], view=values[1], preferred=values[2], choices=values[3], slots=slots,
                           visible=visible)


def run_compare(methods=("slm+", "llm", "specsteer"), blind=True, **overrides):
    values = settings(max_new_tokens=10, **overrides)
    values.pop("method")
    values.pop("exact")
    return [frame_of(frame) for frame in compare_tab.run_comparison(sample_history(), **values, methods=list(methods),
                                                                      blind=blind)]


def test_comparison_annotation_reveal_export_and_agreement():
    frames = run_compare()
    final = frames[-1]
    view = final.view
    assert isinstance(view, compare_tab.ComparisonView) and sorted(view.order) == ["llm", "slm+", "specsteer"]
    assert "Saved as comparison" in final.status
    assert [update["visible"] for update in frames[0].visible] == [True] * 3 + [False] * (compare_tab.MAX_SLOTS - 3)
    for slot in final.slots[:3]:  # blind: labels only
        assert "Output" in slot and "SpecSteer" not in slot and "SLM+" not in slot

    ratings = [4, 5, 2, 3, 3, 3] + [None] * (2 * compare_tab.MAX_SLOTS - 6)
    status, revealed, *rest = compare_tab.submit_annotation(view, "ann-1", "A", "A reads like the user", *ratings)
    slots, table, agreement = rest[:compare_tab.MAX_SLOTS], rest[-2], rest[-1]
    assert "Saved annotation" in status and revealed.revealed
    assert method_label(view.order[0]) in slots[0]  # revealed after the judgement
    assert any(row[0] == method_label(view.order[0]) and row[2] == 1 for row in table)
    assert "no comparison has been judged by two" in agreement
    again = compare_tab.submit_annotation(revealed, "ann-1", "B", "", *ratings)
    assert "already saved" in again[0]

    reopened = frame_of(compare_tab.open_comparison(view.comparison_id))
    assert reopened.view.comparison_id == view.comparison_id and not reopened.view.revealed
    second = reopened.view
    preferred_label = "ABC"[second.order.index(view.order[0])]  # agrees with the first annotator
    status, *_rest = compare_tab.submit_annotation(second, "ann-2", preferred_label, "", *ratings)
    assert "Saved annotation" in status
    rows, agreement = compare_tab.summary_table()
    assert "1 comparison(s) judged by two or more" in agreement and "pairwise agreement 100%" in agreement

    csv_file, message = compare_tab.export_annotations("csv")
    assert "Exported 2" in message and csv_file["visible"]
    assert open(csv_file["value"]).read().count("\n") == 3
    jsonl_file, _ = compare_tab.export_annotations("jsonl")
    jsonl_path = jsonl_file["value"]
    lines = [json.loads(line) for line in open(jsonl_path)]
    assert {line["annotator"] for line in lines} == {"ann-1", "ann-2"}
    assert lines[0]["preferred_method"] == view.order[0]


def test_comparison_not_blind_shows_names_in_method_order():
    final = run_compare(methods=("specsteer", "slm"), blind=False)[-1]
    assert final.view.order == ["slm", "specsteer"]
    assert "SLM" in final.slots[0] and "SpecSteer" in final.slots[1]


def test_annotation_needs_name_and_choice_and_a_comparison():
    final = run_compare(methods=("slm",))[-1]
    none = [None] * (2 * compare_tab.MAX_SLOTS)
    assert "Enter your name" in compare_tab.submit_annotation(final.view, " ", "A", "", *none)[0]
    assert "Pick the output" in compare_tab.submit_annotation(final.view, "x", None, "", *none)[0]
    assert "Run a comparison" in compare_tab.submit_annotation(None, "x", "A", "", *none)[0]
    assert "Choose at least one method" in run_compare(methods=())[-1].status
    assert "nothing to export" in compare_tab.export_annotations("csv")[1]


def test_comparison_stop_does_not_save():
    request = SimpleNamespace(session_hash="session-compare")
    values = settings(max_new_tokens=1000)
    values.pop("method")
    values.pop("exact")
    stopped = None
    for frame in compare_tab.run_comparison(sample_history(), **values, methods=["slm", "llm"], blind=True,
                                            request=request):
        if "generating…" in " ".join(map(str, frame_of(frame).slots)):
            stopped = frame_of(compare_tab.stop_comparison(request))
            break
    assert stopped is not None and "not saved" in stopped.status
    assert storage.list_comparisons() == []


# --------------------------------------------------------------------------- dashboard


def dashboard_values(**overrides):
    values = dict(source="sample", upload=None, task="review", records=1, methods=["llm", "specsteer"],
                  alphas="1.0, 0.1", betas="1", pairing_id=pairs.TINY_PAIRING_ID, max_new_tokens=4, draft_len=2,
                  run_name="")
    values.update(overrides)
    return values


def test_dashboard_run_shows_figures_table_and_survives_restart():
    frames = list(dashboard_tab.run_batch(**dashboard_values(run_name="ui-test-run")))
    assert any("ss-progress" in str(frame.status) for frame in frames)
    final = frames[-1]
    assert "finished" in final.status and "3 cells computed" in final.status
    assert final.quality.data and final.acceptance.data
    assert list(final.table["method"]) == ["LLM", "SpecSteer", "SpecSteer"]
    storage.reset_engines()  # as after an app restart
    choices = dashboard_tab.run_choices()
    assert len(choices) == 1 and "ui-test-run" in choices[0][0] and "3/3 cells" in choices[0][0]
    view = dashboard_tab.open_runs([choices[0][1]])
    assert "Showing #" in view.status and len(view.table) == 3
    again = list(dashboard_tab.run_batch(**dashboard_values(run_name="ui-test-run")))[-1]
    assert "0 cells computed now, 3 stored" in again.status  # resumed: nothing left to do


def test_dashboard_compares_runs():
    first = list(dashboard_tab.run_batch(**dashboard_values(run_name="one")))[-1]
    second = list(dashboard_tab.run_batch(**dashboard_values(run_name="two", methods=["slm+"])))[-1]
    assert "finished" in first.status and "finished" in second.status
    ids = [run_id for _, run_id in dashboard_tab.run_choices()]
    view = dashboard_tab.open_runs(ids)
    assert set(view.table["run"]) == {f"#{ids[0]} two", f"#{ids[1]} one"}
    assert any(trace.name.startswith("#") for trace in view.quality.data)


def test_dashboard_cancel_keeps_finished_cells():
    request = SimpleNamespace(session_hash="session-dashboard")
    values = dashboard_values(records=3, max_new_tokens=200, methods=["slm", "llm"], run_name="to-cancel")
    cancelled = None
    for frame in dashboard_tab.run_batch(**values, request=request):
        if "ss-progress" in str(frame.status) and "on record" in str(frame.status):
            cancelled = dashboard_tab.cancel_batch(request)
            break
    assert cancelled is not None and "cancelled" in cancelled.status and "same name to resume" in cancelled.status
    run = storage.get_run_by_name("to-cancel")
    assert run.status == "cancelled" and run.cell_count < 6


def test_dashboard_input_errors_are_messages(tmp_path):
    assert "not a number" in list(dashboard_tab.run_batch(**dashboard_values(alphas="0.1, x")))[-1].status
    assert "Upload a LongLaMP" in list(dashboard_tab.run_batch(**dashboard_values(source="upload")))[-1].status
    bad = write(tmp_path, "bad.jsonl", '{"input": "x"}\n')
    status = list(dashboard_tab.run_batch(**dashboard_values(source="upload", upload=bad)))[-1].status
    assert "ss-box-error" in status and "Traceback" not in status
    assert "Choose one or more" in dashboard_tab.open_runs([]).status


def test_dashboard_upload_is_copied_into_the_data_folder(tmp_path):
    records = bundled_sample_path("review").read_text()
    upload = write(tmp_path, "mine.jsonl", records)
    final = list(dashboard_tab.run_batch(**dashboard_values(source="upload", upload=upload, methods=["slm"])))[-1]
    assert "finished" in final.status
    config = storage.list_runs()[0].config
    assert "uploads" in config["data"]
