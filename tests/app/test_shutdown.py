"""Stopping on SIGTERM: ``python app.py`` and ``python -m specsteer cloud`` as real processes.

The app runs the tiny test pair (SPECSTEER_TEST_PAIR=tiny) on a free loopback port with its own
database. A generation is started through the API, the process gets SIGTERM while tokens stream, and
the test checks what a container's ``docker stop`` needs: exit status 0, an exit well within the 10 s
before the kill (15 s here: a bound on correctness, not a benchmark), and the generation stored as
stopped with the tokens it had produced.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specsteer.service import pairings

pytest.importorskip("gradio_client")

import httpx  # noqa: E402
from gradio_client import Client  # noqa: E402

import storage  # noqa: E402
from specsteer.cloud.process import free_loopback_port, start_cloud_process  # noqa: E402
from specsteer.util import background  # noqa: E402
from testkit import API_GENERATE  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXIT_LIMIT_S = 15.0
# An emulated 100 ms round trip per verification: a 400-token generation takes many seconds, so the
# signal surely arrives while it runs.
LONG_GENERATION = {**API_GENERATE, "max_new_tokens": 400, "rtt_ms": 100.0}


def environment(data: Path, port: int) -> dict[str, str]:
    return {
        **os.environ,
        pairings.TEST_PAIR_ENV: "tiny",
        "SPECSTEER_DATA_DIR": str(data),
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "DATABASE_URL": "",
    }


def wait_until_serving(process: subprocess.Popen, url: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the app exited with status {process.returncode} before serving")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"the app did not serve {url} within {timeout_s:g} s")


def stop_and_time(process: subprocess.Popen) -> tuple[int, float]:
    """SIGTERM, then the exit status and the seconds until the process ended (killed past the limit)."""
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        status = process.wait(EXIT_LIMIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"still running {EXIT_LIMIT_S:g} s after SIGTERM")
    return status, time.monotonic() - sent


@pytest.mark.slow
def test_sigterm_mid_generation_saves_the_partial_output_and_exits_0(tmp_path):
    data, port = tmp_path / "data", free_loopback_port()
    log = (tmp_path / "app.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=REPO,
        env=environment(data, port),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until_serving(process, url)
        client = Client(url, verbose=False, analytics_enabled=False, download_files=str(tmp_path / "downloads"))
        client.predict("review", api_name="/load_sample")
        job = client.submit(**LONG_GENERATION, api_name="/generate")
        streamed = threading.Event()

        def watch() -> None:  # the client's frames, until one shows generated tokens
            for frame in job:
                if isinstance(frame[1], str) and "ss-tok" in frame[1]:
                    streamed.set()
                    return

        threading.Thread(target=watch, daemon=True).start()
        assert streamed.wait(120), "no tokens streamed"
        status, seconds = stop_and_time(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()

    output = (tmp_path / "app.log").read_text(errors="replace")
    assert status == 0, output
    assert seconds < EXIT_LIMIT_S
    assert "SIGTERM: stopping" in output
    url = f"sqlite:///{(data / storage.db.DB_FILENAME).resolve()}"
    storage.reset_engines()
    try:
        stored = storage.list_generations(url=url)
        assert len(stored) == 1
        generation = storage.get_generation(stored[0]["id"], url=url)
    finally:
        storage.reset_engines()
    assert generation["stats"]["stop_reason"] == "cancelled"
    produced = generation["stats"]["new_tokens"]
    assert 0 < produced < LONG_GENERATION["max_new_tokens"]
    # Every token shown is stored (rejected drafts included). The text itself may still be empty: the
    # tiny models emit random bytes, and a piece that ends inside a UTF-8 character is held back.
    assert len(generation["tokens"]) >= produced


@pytest.mark.slow
def test_sigterm_with_nothing_running_exits_0(tmp_path):
    port = free_loopback_port()
    process = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=REPO,
        env=environment(tmp_path / "data", port),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_serving(process, f"http://127.0.0.1:{port}/")
        status, seconds = stop_and_time(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert status == 0 and seconds < EXIT_LIMIT_S


@pytest.mark.slow
def test_the_cloud_service_exits_0_on_sigterm(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    with (tmp_path / "cloud.log").open("wb") as log:
        child = start_cloud_process("--pairing", pairings.TINY_PAIRING_ID, env=env, stderr=log, ready_timeout_s=180)
        status, seconds = stop_and_time(child.process)
    assert status == 0 and seconds < EXIT_LIMIT_S


# --------------------------------------------------------------------------- in process


@pytest.fixture
def reopened(monkeypatch):
    """cancel_all marks the process as shutting down; undo that for the tests that follow."""
    monkeypatch.setattr(background, "_closing", threading.Event())


def test_cancel_all_sets_every_running_works_flag_and_refuses_new_work(reopened):
    def until_cancelled(emit, cancel):
        cancel.wait(30)
        return "ended" if cancel.is_set() else "timed out"

    works = [background.Background(until_cancelled, name=f"work-{n}") for n in range(3)]
    background.cancel_all()
    assert not [name for name in background.wait_all(10) if name.startswith("work-")]
    assert [work.result() for work in works] == ["ended"] * 3
    late = background.Background(until_cancelled, name="late")  # started while shutting down
    assert late.result(10) == "ended"


def test_wait_all_names_the_work_that_does_not_end_in_time(reopened):
    release = threading.Event()
    stubborn = background.Background(lambda emit, cancel: release.wait(30), name="stubborn-load")
    background.cancel_all()
    try:
        assert "stubborn-load" in background.wait_all(0.2)
    finally:
        release.set()
    assert stubborn.wait(10)
