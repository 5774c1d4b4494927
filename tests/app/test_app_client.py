"""The launched app over HTTP with gradio_client: streaming, comparison, annotation, dashboard, queueing.

The app runs in-process on a free loopback port with the tiny test pair (SPECSTEER_TEST_PAIR=tiny)
and a temporary database.
"""

from __future__ import annotations

import csv
import logging
import os
import time
from pathlib import Path

import pytest

from specsteer.service import pairings

pytest.importorskip("gradio_client")

from gradio_client import Client, handle_file  # noqa: E402
from gradio_client.utils import Status  # noqa: E402

import storage  # noqa: E402
from specsteer.stores.generations import RATING_CRITERIA  # noqa: E402
from testkit import API_GENERATE  # noqa: E402
from ui.compare_handlers import MAX_SLOTS  # noqa: E402

pytestmark = pytest.mark.slow  # the app served on loopback, driven by gradio_client

GENERATE = API_GENERATE


@pytest.fixture(scope="module")
def server(app_server):
    return app_server


def client_for(server, tmp_path=None) -> Client:
    url, data = server
    return Client(url, verbose=False, analytics_enabled=False, download_files=str(tmp_path or data / "downloads"))


def downloaded(file_output) -> str:
    """The local path of a downloaded gr.File output (a visibility update carries it under "value")."""
    return file_output["value"] if isinstance(file_output, dict) else file_output


def test_api_lists_the_endpoints(server):
    api = client_for(server).view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name in (
        "/load_sample",
        "/upload_history",
        "/generate",
        "/stop_generate",
        "/compare",
        "/annotate",
        "/open_comparison",
        "/export_csv",
        "/export_jsonl",
        "/evaluate",
        "/open_runs",
    ):
        assert name in api


def test_generate_streams_frames_one_by_one(server):
    client = client_for(server)
    summary, task, _input, _upload = client.predict("review", api_name="/load_sample")
    assert "Read 8 items" in summary and task == "review"
    job = client.submit(**GENERATE, api_name="/generate")
    arrivals = []
    for frame in job:  # frames arrive while the generation runs
        arrivals.append((time.monotonic(), frame))
    outputs = [frame[1] for _, frame in arrivals if isinstance(frame[1], str) and "ss-tok" in frame[1]]
    assert len(outputs) >= 3 and len(set(outputs)) >= 3, "several intermediate outputs should arrive"
    assert arrivals[-1][0] - arrivals[0][0] > 0  # spread over time, not one batch
    status, output, stats, _retrieved, privacy = job.outputs()[-1]
    assert "saved as generation #" in status
    assert "ss-tok-" in output and 'data-state="length"' in stats
    assert "Privacy check passed" in privacy


def test_upload_errors_reach_the_page_as_messages(server, tmp_path):
    client = client_for(server)
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"summary": "ok", "reviewText": "fine"}\n{"summary": \n')
    summary, _task, _sample = client.predict(handle_file(str(bad)), api_name="/upload_history")
    assert "ss-box-error" in summary and "line 2" in summary and "Traceback" not in summary
    assert "broken.jsonl" in summary  # the user's file name, not the server's temporary one
    good = tmp_path / "mine.txt"
    good.write_text("I hike every weekend.\n\nI love lakes and early starts.")
    summary, task, sample = client.predict(handle_file(str(good)), api_name="/upload_history")
    assert "Read 2 items" in summary and task == "free" and sample is None


def test_unavailable_pairing_gives_a_clear_error(server):
    client = client_for(server)
    client.predict("review", api_name="/load_sample")
    status, *_ = client.predict(**{**GENERATE, "pairing": "qwen3-0.6b__qwen3-1.7b"}, api_name="/generate")
    assert "unavailable here" in status and "no model hub" in status


def test_a_failure_toast_reaches_the_client(server):
    """The warning toast of a run's failure is sent to the page (a log message on the event's stream)."""
    client = client_for(server)
    client.predict("review", api_name="/load_sample")
    job = client.submit(**{**GENERATE, "pairing": "qwen3-0.6b__qwen3-1.7b"}, api_name="/generate")
    job.result(timeout=60)
    logs = []
    while not job.communicator.updates.empty():
        update = job.communicator.updates.get_nowait()
        if getattr(update, "log", None):
            logs.append(update.log)
    assert [level for _message, level in logs] == ["warning"]
    assert "unavailable here" in logs[0][0]


def test_compare_annotate_and_export(server, tmp_path):
    client = client_for(server, tmp_path)
    client.predict("writing", api_name="/load_sample")
    settings = {
        **GENERATE,
        "task": "writing",
        "input_text": "Generate the content for a reddit post about rye bread",
        "max_new_tokens": 12,
    }
    final = client.predict(**settings, methods=["slm+", "llm", "specsteer"], blind=True, api_name="/compare")
    status, _preferred, _saved, *slots = final
    assert "Saved as comparison #" in status
    assert all("Output" in slot for slot in slots[:3])
    assert not any("SpecSteer" in slot for slot in slots[:3])  # blind until judged

    rating_inputs = len(RATING_CRITERIA) * MAX_SLOTS  # one slot per method Compare can judge
    ratings = [5, 4, 3, 3, 2, 2] + [None] * (rating_inputs - 6)
    status, *revealed = client.predict("annotator-1", "A", "first judgement", *ratings, api_name="/annotate")
    assert "Saved annotation" in status
    assert sum(name in " ".join(map(str, revealed[:3])) for name in ("SpecSteer", "SLM+", "LLM")) == 3

    # A second annotator reopens the same comparison in their own session.
    other = client_for(server, tmp_path)
    comparison_id = storage.list_comparisons()[0]["id"]
    reopened = other.predict(comparison_id, api_name="/open_comparison")
    assert f"Opened comparison #{comparison_id}" in reopened[0]
    status, *_ = other.predict("annotator-2", "tie", "", *([None] * rating_inputs), api_name="/annotate")
    assert "Saved annotation" in status

    csv_file, message = client.predict(api_name="/export_csv")
    assert "Exported" in message
    with open(downloaded(csv_file), newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["annotator"] for row in rows} >= {"annotator-1", "annotator-2"}
    jsonl_file, _ = client.predict(api_name="/export_jsonl")
    assert open(downloaded(jsonl_file), encoding="utf-8").read().count("\n") == len(rows)
    table, agreement = client.predict(api_name="/annotation_summary")
    assert table["headers"][0] == "method" and len(table["data"]) == 3
    assert "judged from two or more page sessions" in agreement and "Unverified" in agreement


def test_dashboard_one_record_run(server):
    client = client_for(server)
    status, quality, acceptance, table, _differences, runs = client.predict(
        source="sample",
        upload=None,
        task="review",
        records=1,
        methods=["llm", "specsteer"],
        alphas="0.1",
        betas="1",
        pairing=pairings.TINY_PAIRING_ID,
        runtime="auto",
        max_new_tokens=4,
        draft_len=2,
        run_name="client-run",
        api_name="/evaluate",
    )
    assert "finished" in status and "2 cells computed" in status
    assert quality and acceptance  # plotly figures, serialized
    assert [row[0] for row in table["value"]["data"]] == ["LLM", "SpecSteer"]  # an update: value and column widths
    assert len(table["column_widths"]) == len(table["value"]["headers"])
    run_id = storage.get_run_by_name("client-run").id
    status, *_ = client.predict([run_id], api_name="/open_runs")
    assert "client-run" in status


def test_second_user_waits_in_the_queue_then_runs(server):
    """Model events share one slot: a second generation queues (with a position) instead of failing."""
    first, second = client_for(server), client_for(server)
    first.predict("review", api_name="/load_sample")
    second.predict("review", api_name="/load_sample")
    long_job = first.submit(**{**GENERATE, "max_new_tokens": 1000}, api_name="/generate")
    deadline = time.monotonic() + 60
    while not long_job.outputs() and time.monotonic() < deadline:
        time.sleep(0.05)
    waiting = second.submit(**{**GENERATE, "max_new_tokens": 4}, api_name="/generate")
    seen = set()
    while time.monotonic() < deadline:
        seen.add(waiting.status().code)
        if Status.IN_QUEUE in seen or waiting.done():
            break
        time.sleep(0.05)
    assert Status.IN_QUEUE in seen, f"the second user should wait in the queue, saw {seen}"
    assert not waiting.done()
    status, output, stats, _retrieved, _privacy = first.predict(api_name="/stop_generate")  # first user's Stop
    assert "Stopped" in status and "saved as generation" in status  # the partial output is kept
    assert "ss-tok" in output and 'data-state="cancelled"' in stats
    result = waiting.result(timeout=60)
    assert "saved as generation" in result[0]


def call_raw(server, endpoint: str, *data) -> str:
    """One call of a named endpoint with hand-written JSON, as an outside caller sends it (gradio_client
    would upload a local path first): the text of its event stream."""
    import httpx

    url, _ = server
    with httpx.Client(base_url=url, timeout=60) as http:
        event = http.post(f"gradio_api/call/{endpoint}", json={"data": list(data)}).json()["event_id"]
        return http.get(f"gradio_api/call/{endpoint}/{event}").text


def test_a_server_path_sent_as_a_file_is_refused(server, tmp_path):
    """A caller named a server file in /upload_history's FileData and its text came back."""
    planted = tmp_path / "secret_notes.txt"
    planted.write_text("API_TOKEN=hunter2-planted\n\nanother private line")
    named = {"path": str(planted), "meta": {"_type": "gradio.FileData"}, "orig_name": "secret_notes.txt"}
    answer = call_raw(server, "upload_history", named)
    assert "hunter2" not in answer and "Read 2 items" not in answer
    assert "event: error" in answer  # Gradio 6.31 refuses a path outside its upload folder before the handler
    # A file inside Gradio's folder that its upload route did not write (an output Gradio cached, such as an
    # annotations export) passes Gradio's check: the handler refuses it.
    from gradio.utils import get_upload_folder

    cached = Path(get_upload_folder()) / f"not-an-upload-{time.monotonic_ns()}" / "secret_notes.txt"
    cached.parent.mkdir(parents=True)
    cached.write_text(planted.read_text())
    answer = call_raw(server, "upload_history", {**named, "path": str(cached)})
    assert "event: complete" in answer and "was not uploaded to the app" in answer, answer
    assert "hunter2" not in answer
    # A real upload of the same content still loads.
    summary, _task, _sample = client_for(server).predict(handle_file(str(planted)), api_name="/upload_history")
    assert "Read 2 items" in summary


def test_a_refused_input_names_the_file_as_sent_and_logs_one_warning_line(server, caplog, capfd):
    """A refused server path came back resolved ("../../etc/hostname" as "/tmp/etc/hostname"), and every refused
    input wrote a ~20-line traceback to the server's log."""
    named = {"path": "../../etc/hostname", "meta": {"_type": "gradio.FileData"}}
    capfd.readouterr()
    with caplog.at_level(logging.WARNING, logger="ui.safe_inputs"):
        answer = call_raw(server, "upload_history", named)
        refused_choice = call_raw(server, "load_sample", "<b>no such sample</b>")
    assert "event: error" in answer and "../../etc/hostname: this file was not uploaded to the app" in answer, answer
    # Never the path resolved on the server (which, from a shallow working directory, is a tail of the one sent).
    assert os.path.abspath("../../etc/hostname") not in answer.replace("../../etc/hostname", "")
    assert "event: error" in refused_choice and "no such sample" in refused_choice
    lines = [record for record in caplog.records if record.name == "ui.safe_inputs"]
    assert [record.levelno for record in lines] == [logging.WARNING, logging.WARNING]
    first, second = (record.getMessage() for record in lines)
    assert first.startswith("refused an input of /upload_history: ../../etc/hostname")
    assert second.startswith("refused an input of /load_sample: ")
    assert all("\n" not in text for text in (first, second)) and all(record.exc_info is None for record in lines)
    assert "Traceback" not in capfd.readouterr().err


def test_a_non_ascii_cloud_secret_stops_the_app_at_start_up(monkeypatch):
    import app

    monkeypatch.setenv("SPECSTEER_CLOUD_SECRET", "pässwörd")
    with pytest.raises(SystemExit, match="not printable ASCII") as caught:
        app.build_service()
    assert "pässwörd" not in str(caught.value)


def test_a_public_app_never_contacts_a_visitor_named_cloud(tmp_path, monkeypatch):
    """/test_cloud and /generate sent the app's secret to any address a visitor typed."""
    import socket
    import threading

    import app
    from testkit import free_port

    connections = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connections.append(listener.accept()[0].recv(4096))
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    for name, value in {
        pairings.TEST_PAIR_ENV: "tiny",
        "SPECSTEER_DATA_DIR": str(tmp_path),
        "SPACE_ID": "someone/specsteer",
        "SPECSTEER_CLOUD_SECRET": "operator-secret",
        "SPECSTEER_CLOUD_URLS": "http://127.0.0.1:9",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    storage.reset_engines()
    demo = app.build_app()
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **app.launch_options())
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, analytics_enabled=False)
        named = f"http://127.0.0.1:{listener.getsockname()[1]}"
        checked = call_raw((f"http://127.0.0.1:{port}/", None), "test_cloud", named, pairings.TINY_PAIRING_ID)
        # Refused by the page's choices (Gradio) or, for any caller that gets past them, by the service.
        assert "not in the list of choices" in checked or "does not connect to other addresses" in checked
        client.predict("review", api_name="/load_sample")
        try:
            answer = str(client.predict(**{**GENERATE, "cloud": named}, api_name="/generate"))
        except Exception as error:  # noqa: BLE001 (Gradio's refusal reaches the client as an exception)
            answer = str(error)
        assert "operator-secret" not in answer
        time.sleep(0.5)
        assert connections == []  # nothing reached the visitor's address
        _file, message = client.predict("", api_name="/export_csv")
        assert "needs the operator" in message  # no token configured: nobody exports in public
    finally:
        stop.set()
        listener.close()
        demo.close()
        storage.reset_engines()
