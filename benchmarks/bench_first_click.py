"""The target "a first click as fast as the second", measured on the app as a visitor meets it.

    .venv/bin/python benchmarks/bench_first_click.py [--pairing tiny-test] [--out FILE]

Starts the app (``app.py``) in a child process on a free loopback port with a temporary SQLite database and
data folder, waits until its start-up warm-up (the default pairing loaded, the default sample's prompts
read: ``ui.warmup``) says ready, then calls Generate through gradio_client on the Generate tab's default
request (the default sample, its input, the default settings) twice, and once on a sample user nobody has
used yet in this app (the honest cold case: its private prompt is in no cache). Each click's
``first_visible_s`` and ``ttft_s`` are the app's own statistics (the stats strip, 10 ms resolution);
``client_s`` is the wall time of the whole call seen from the client. The child is stopped by its pid
(SIGTERM, then SIGKILL after a grace). Writes JSON: the clicks, whether the first click's first visible
token is within the second's plus 20 % (the target), the warm-up's last line and duration, and the CPU
model and flags (``lscpu``).

``--pairing tiny-test`` runs the random tiny pair (seconds; what the test runs); the default is the app's
own default pairing (the real models: minutes, and a quiet machine for numbers worth reading).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specsteer.data.sources import DEFAULT_SAMPLE, SAMPLE_USERS  # noqa: E402
from specsteer.models.tiny import TEST_PAIRING_ID  # noqa: E402

TARGET_RATIO = 1.2  # the first click's first visible token <= the second's plus 20 %
WARM_UP_ENDPOINT = "/lambda"  # the page's load event that follows the warm-up (ui.warmup.build)
STOP_GRACE_S = 60.0
_STAT = r'<div class="ss-stat-name">{name}</div><div class="ss-stat-value">([^<]*)</div>'


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def text_of(fragment: str) -> str:
    """An HTML fragment's text (the app's message boxes), tags and the box's icon left out."""
    return html.unescape(re.sub("<[^>]+>", " ", fragment)).strip(" ✓✕!ℹ●\n")


def stat_seconds(stats_html: str, name: str) -> float | None:
    """A "1.23 s" value of the stats strip by its name ("first visible", "first token"); None for "–"."""
    found = re.search(_STAT.format(name=re.escape(name)), stats_html or "")
    if found is None:
        raise ValueError(f"the stats strip has no {name!r} value: {stats_html[:300]!r}")
    value = found.group(1).strip()
    return None if value in ("–", "") else float(value.removesuffix(" s"))


def lscpu() -> dict[str, object]:
    """The CPU's model name and flags as lscpu reports them (empty where lscpu is missing)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {"model": None, "flags": []}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    return {"model": fields.get("Model name"), "flags": fields.get("Flags", "").split()}


def start_app(pairing: str | None, folder: Path, port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "DATABASE_URL": f"sqlite:///{folder / 'app.db'}",
        "SPECSTEER_DATA_DIR": str(folder / "data"),
        "GRADIO_TEMP_DIR": str(folder / "gradio"),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("SPECSTEER_PUBLIC", None)
    env.pop("SPECSTEER_TEST_PAIR", None)
    if pairing == TEST_PAIRING_ID:
        env["SPECSTEER_TEST_PAIR"] = "tiny"  # the app's test hook: its default pairing is the tiny pair
    log = (folder / "app.log").open("w")
    return subprocess.Popen(
        [sys.executable, str(REPO / "app.py")], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )


def stop_app(child: subprocess.Popen) -> int | None:
    """SIGTERM to the child's pid (the app saves and closes), SIGKILL after the grace; its exit status."""
    if child.poll() is None:
        os.kill(child.pid, signal.SIGTERM)
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
    return child.returncode


def wait_for_server(url: str, child: subprocess.Popen, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the app exited with status {child.returncode} before serving")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"the app did not serve {url} within {timeout_s:.0f} s")


def wait_for_warm_up(client, timeout_s: float) -> str:
    """The warm-up's last line once it is ready (or failed: raised)."""
    job = client.submit(api_name=WARM_UP_ENDPOINT)
    deadline = time.monotonic() + timeout_s
    line = ""
    while time.monotonic() < deadline:
        if job.done():
            outputs = job.outputs()
            line = outputs[-1] if outputs else ""
            break
        time.sleep(0.5)
    else:
        job.cancel()
        raise TimeoutError(f"the warm-up was not ready within {timeout_s:.0f} s")
    if "ss-box-ok" not in line:
        raise RuntimeError(f"the warm-up did not end ready: {text_of(line)!r}")
    return " ".join(text_of(line).split())


def click(client, label: str, sample: str, **request) -> dict[str, object]:
    """One Generate call; the app's first-visible and first-token seconds from its final stats strip."""
    started = time.perf_counter()
    status, _output, stats, _retrieved, _privacy = client.predict(**request, api_name="/generate")
    seconds = time.perf_counter() - started
    if "ss-box-error" in str(status):
        raise RuntimeError(f"{label}: Generate failed: {text_of(str(status))!r}")
    return {
        "click": label,
        "sample": sample,
        "first_visible_s": stat_seconds(stats, "first visible"),
        "ttft_s": stat_seconds(stats, "first token"),
        "client_s": round(seconds, 3),
    }


def measure(pairing: str | None, timeout_s: float, cold_sample: str) -> dict[str, object]:
    from gradio_client import Client

    folder = Path(tempfile.mkdtemp(prefix="specsteer-first-click-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    started = time.monotonic()
    child = start_app(pairing, folder, port)
    try:
        wait_for_server(url, child, timeout_s)
        client = Client(url, verbose=False, download_files=str(folder / "downloads"))
        warm_up = wait_for_warm_up(client, timeout_s)
        ready_s = time.monotonic() - started
        clicks = [click(client, label, DEFAULT_SAMPLE) for label in ("first", "second")]
        # The cold case: another sample user, in a session of its own, whose prompts nobody has read.
        cold = Client(url, verbose=False, download_files=str(folder / "downloads"))
        _summary, task, input_text, _upload = cold.predict(cold_sample, api_name="/load_sample")
        clicks.append(click(cold, "cold", cold_sample, task=task, input_text=input_text))
    finally:
        status = stop_app(child)
        log_tail = (folder / "app.log").read_text(errors="replace")[-2000:] if (folder / "app.log").exists() else ""
        shutil.rmtree(folder, ignore_errors=True)
    first, second = clicks[0], clicks[1]
    within = (
        first["first_visible_s"] <= TARGET_RATIO * second["first_visible_s"]  # type: ignore[operator]
        if first["first_visible_s"] is not None and second["first_visible_s"] is not None
        else None
    )
    return {
        "pairing": pairing or "the app's default",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "warm_up": warm_up,
        "start_to_ready_s": round(ready_s, 2),
        "clicks": clicks,
        "target": f"first click's first_visible_s <= {TARGET_RATIO} x the second's",
        "first_within_target": within,
        "cpu": lscpu(),
        "app_exit_status": status,
        "app_log_tail": log_tail,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairing", default=None, help=f"'{TEST_PAIRING_ID}' for the tiny pair; default: the app's")
    parser.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="for the start and the warm-up each")
    others = [key for key in SAMPLE_USERS if key != DEFAULT_SAMPLE]
    parser.add_argument("--cold-sample", default=others[0], choices=others, help="the sample user of the cold click")
    args = parser.parse_args(argv)
    if args.pairing not in (None, TEST_PAIRING_ID):
        parser.error(f"--pairing is {TEST_PAIRING_ID} or left out (the app's default pairing)")
    result = measure(args.pairing, args.timeout_s, args.cold_sample)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
