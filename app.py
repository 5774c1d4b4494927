"""SpecSteer web app: ``python app.py`` serves it on http://127.0.0.1:7860.

One Gradio Blocks app built from ``ui/`` (one module per tab) over one ``specsteer.service.app_service.AppService``.
This file is the composition root: it alone chooses where things are kept (the SQL stores of
``storage/``: SQLite in ``$SPECSTEER_DATA_DIR``, default ./data, or ``DATABASE_URL``; beside the user's runs,
the example runs of ``assets/example_runs.db``, read-only) and which
pairings may load (``specsteer.service.pairings.catalog``), and hands them to the service the tabs share. The same
file is the Hugging Face Spaces entry point and the Docker command; host and port come from
GRADIO_SERVER_NAME / GRADIO_SERVER_PORT. Where the data lives, and whether a restart keeps it (a Space's own
disk does not), is said at start in the log and at the foot of the page (``storage.location``).

The default pairing loads in the background at start-up, and the default sample's prompts are read
once (``ui.warmup``), so the page opens at once and a first Generate of the default sample waits for neither
(``benchmarks/bench_first_click.py`` measures it; another sample reads its own prompts first). Every
interactive event that runs a model shares one queue slot (concurrency id "models"): a second user waits
with a visible queue position instead of doubling the memory in use. An evaluation grid has its own slot
("grid") and takes the models one cell at a time, after any waiting generation (specsteer/util/turns.py), so
one visitor's grid never keeps another's generation waiting for more than a cell. One client (one address)
holds at most a few model jobs at once, queued or running, and a full queue answers "busy, about N s"
(``ui.fair_queue``).

What one visitor may ask for (grid sizes, tokens, text lengths, request sizes, the server's read
timeouts) is ``specsteer.service.limits.VisitorLimits``: the public or local defaults by where the app runs
(specsteer/protocol/exposure.py); the service checks the work, ``ui.http_limits`` the requests.

SIGTERM (``docker stop``, an orchestrator, a Space restart) and SIGINT (Ctrl-C) stop it gracefully:
no new requests, every running generation and evaluation run cancelled so that it saves what it
produced, the database closed, exit status 0 (:func:`shut_down`). A second signal exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
import time

# No network here and no telemetry wanted anywhere: set before gradio is imported.
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pathlib import Path  # noqa: E402

# First of the project's modules: on a ZeroGPU Space it imports `spaces`, which must come before anything
# initialises CUDA; on a GPU it places the transformers runtime there; on a CPU it changes nothing.
from ui import gpu_space  # noqa: E402

SPACE_HARDWARE = gpu_space.detect()

import gradio as gr  # noqa: E402

import storage  # noqa: E402
from specsteer.cloud.api import CLOUD_SECRET_ENV  # noqa: E402
from specsteer.data.sources import EXAMPLE_RUNS_DB  # noqa: E402
from specsteer.protocol.exposure import Exposure, secret_problem  # noqa: E402
from specsteer.service import pairings  # noqa: E402
from specsteer.service.app_service import AppService  # noqa: E402
from specsteer.service.campaigns import CampaignService  # noqa: E402
from specsteer.service.example_runs import JudgesWithExamples, RunsWithExamples  # noqa: E402
from specsteer.service.fair_share import QueuePolicy  # noqa: E402
from specsteer.service.limits import VisitorLimits, limits_for  # noqa: E402
from specsteer.stores.protocols import JudgeReader, RunStore  # noqa: E402
from specsteer.util import background  # noqa: E402
from storage.db import data_dir  # noqa: E402
from storage.location import data_location  # noqa: E402
from ui import campaign_tab, compare_tab, dashboard_tab, fair_queue, generate_tab, judge_tab, warmup  # noqa: E402
from ui.http_limits import server_options  # noqa: E402
from ui.safe_inputs import guard_inputs  # noqa: E402

ASSETS = Path(__file__).resolve().parent / "assets"
CSS_PATH = ASSETS / "style.css"
# The queue: at most this many model jobs wait at once (all clients together; one client holds at most its
# share, VisitorLimits.queue_share), and beyond them this much room stays for quick calls (a sample, an upload, a
# stored run), which have concurrency groups of their own and never wait behind a model job (ui/fair_queue.py).
QUEUE_MAX_SIZE = 64
QUICK_CALLS_ROOM = 64
# Gradio's temporary files (every upload, every download): checked this often, removed at this age.
# An evaluation keeps its records file in the data folder, a history is read at once: none needs its
# temporary copy for long.
TEMP_FILES_CHECK_S = 600
TEMP_FILES_MAX_AGE_S = 3600

HEADER = """
<div class="ss-header">
  <div class="ss-title">SpecSteer</div>
  <div class="ss-subtitle">Personalized text from a small model on your device and a large one in the cloud:
  the device drafts with your history, the cloud verifies without ever seeing it.</div>
</div>
"""


def theme() -> gr.themes.Base:
    # System fonts only: a theme's web fonts would be fetched from the internet on every page load.
    return gr.themes.Soft(
        primary_hue="indigo",
        secondary_hue="teal",
        neutral_hue="slate",
        font=["ui-sans-serif", "system-ui", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
        font_mono=["ui-monospace", "SFMono-Regular", "Menlo", "Consolas", "monospace"],
    )


def launch_options(limits: VisitorLimits | None = None) -> dict:
    """Look and limits; pass them to every ``launch()`` (Gradio 6 takes theme and CSS there). ``limits``:
    the request sizes and read timeouts of the server (ui.http_limits), by default those of where the
    app runs (public or local)."""
    limits = limits or limits_for(Exposure.from_environment().public)
    return {"theme": theme(), "css_paths": [CSS_PATH], **server_options(limits)}


def run_store(examples: Path = EXAMPLE_RUNS_DB) -> RunStore:
    """The user's evaluation runs (``DATABASE_URL`` / the data folder) with the example runs of ``examples``
    beside them, read-only and opened as immutable (assets may sit on a read-only filesystem: an image, a
    Space); the user's alone when that file is absent."""
    own = storage.SqlRunStore()
    if not examples.is_file():
        return own
    return RunsWithExamples(own, storage.SqlRunStore(storage.read_only_url(examples, immutable=True)))


def judge_reader(url: str | None = None, examples: Path = EXAMPLE_RUNS_DB) -> JudgeReader:
    """The LLM-judge grades of :func:`run_store`'s runs in the database ``url`` (default: ``DATABASE_URL`` / the
    data folder), by the same ids (an example run's: none, where its read-only file has no judge tables)."""
    own = storage.SqlJudgeStore(url)
    if not examples.is_file():
        return own
    return JudgesWithExamples(own, storage.SqlJudgeStore(storage.read_only_url(examples, immutable=True)))


def build_service() -> AppService:
    """The one service every tab uses, on the database that ``DATABASE_URL`` / the data folder names (its runs
    with the example runs beside them: :func:`run_store`); a
        remote Cloud's shared secret comes from ``$SPECSTEER_CLOUD_SECRET`` (never from a form); uploaded records
    files are kept in the data folder's ``uploads/`` (a resumed evaluation finds its file there); whether
        the app serves the public, with its operator's choices, from the environment (specsteer/protocol/exposure.py)."""
    secret = os.environ.get(CLOUD_SECRET_ENV)
    problem = secret_problem(secret, f"${CLOUD_SECRET_ENV}")
    if problem:
        raise SystemExit(f"error: {problem}")
    return AppService(
        store=storage.SqlGenerationStore(),
        runs=run_store(),
        pairs=pairings.catalog(SPACE_HARDWARE.placement),
        cloud_secret=secret,
        exposure=Exposure.from_environment(),
        uploads=data_dir() / "uploads",
    )


def build_app(service: AppService | None = None, campaigns: CampaignService | None = None) -> gr.Blocks:
    storage.init_db()  # create the tables now, so the first request does not pay for it
    service = service or build_service()
    url = getattr(service.store, "url", None)
    judges = judge_reader(url)
    campaigns = campaigns or service.campaigns(storage.SqlCampaignStore(url), judges)
    with gr.Blocks(
        title="SpecSteer", analytics_enabled=False, delete_cache=(TEMP_FILES_CHECK_S, TEMP_FILES_MAX_AGE_S)
    ) as demo:
        gr.HTML(HEADER)
        warmup.build(demo, service)
        with gr.Tabs():
            with gr.Tab("Generate", id="generate"):
                controls = generate_tab.build(service)
            with gr.Tab("Compare & annotate", id="compare"):
                comparisons = compare_tab.build(service, controls)
            with gr.Tab("Dashboard", id="dashboard"):
                runs = dashboard_tab.build(service, campaigns, judges)
            with gr.Tab("Judge", id="judge"):
                judging = judge_tab.build(campaigns)
            with gr.Tab("Campaigns", id="campaigns"):
                panel = campaign_tab.build(campaigns, service)
        # Other users (or an earlier run of the app) may have stored comparisons and runs since
        # the page was built: list them afresh whenever a page opens.
        for stored in (comparisons, runs):
            stored.on_load(demo)
        judge_tab.on_load(judging, demo)
        generate_tab.on_load(demo)
        campaign_tab.on_load(panel, demo)
        gr.Markdown(data_location(getattr(service.store, "url", None)).page_line(), elem_classes=["ss-note"])
    # api_open=False: every queued endpoint goes through the queue (and its fair share); Gradio would otherwise
    # serve them directly at /gradio_api/run/<name> wherever the app is not a Space.
    demo.queue(default_concurrency_limit=4, max_size=QUEUE_MAX_SIZE + QUICK_CALLS_ROOM, api_open=False)
    fair_queue.install(demo, QueuePolicy(share=service.limits.queue_share, max_waiting=QUEUE_MAX_SIZE))
    # A value an endpoint's component cannot read gets a message naming the input (ui/safe_inputs.py).
    return guard_inputs(demo)


# --------------------------------------------------------------------------- stopping

SHUTDOWN_GRACE_S = 5.0  # how long running work may take to end and save (a model load cannot be cut short)
# A page's event stream never ends by itself, so the server would wait for it until Gradio gives up (5 s):
# open connections are cut after this instead.
CONNECTIONS_GRACE_S = 1.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignal:
    """Records the first SIGTERM / SIGINT; a second one ends the process at once (exit 128 + signal).

    A handler is installed for SIGTERM because Python leaves it at the kernel's default, and as PID 1
    of a container (no init) the kernel drops a signal that has no handler.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        for number in STOP_SIGNALS:
            signal.signal(number, self._on_signal)

    def _on_signal(self, number: int, _frame: object) -> None:
        # Only an attribute is set here: a signal handler runs between two bytecodes of the main
        # thread, which may hold any lock at that moment.
        if self.received is not None:
            os._exit(128 + number)
        self.received = number

    def wait(self, poll_s: float = 0.2) -> int:
        """Block until a stop signal arrives; its number."""
        while self.received is None:
            time.sleep(poll_s)
        return self.received


def shut_down(demo: gr.Blocks, grace_s: float = SHUTDOWN_GRACE_S) -> tuple[str, ...]:
    """Stop the app: cancel every run (a generation ends at its next token and is saved as stopped, an
    evaluation run ends cancelled with its finished cells stored, work that starts now is cancelled at
    once), close the server and its queue, give the runs ``grace_s`` seconds to end, close the database.
    Returns the names of runs still going when it gave up waiting."""
    background.cancel_all()
    server = getattr(demo, "server", None)  # Gradio's uvicorn.Server, which reads this when it shuts down
    if server is not None:
        server.config.timeout_graceful_shutdown = CONNECTIONS_GRACE_S
    demo.close(verbose=False)
    unfinished = background.wait_all(grace_s)
    storage.reset_engines()
    return unfinished


def main() -> None:
    stop = StopSignal()
    service = build_service()
    print(data_location().log_line(), file=sys.stderr, flush=True)  # on a Space: whether a restart loses it
    if SPACE_HARDWARE.zero_gpu:
        # No GPU outside a GPU task: the default pairing loads here, on the main thread, and no prompt is read.
        print(gpu_space.preload(service, pairings.default_pairing_id(service.pairs)), file=sys.stderr, flush=True)
    else:
        warmup.start(service)  # the default pairing loads, and the default sample's prompts are read, meanwhile
    demo = build_app(service)
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        prevent_thread_lock=True,
        **launch_options(),
    )
    number = stop.wait()
    print(
        f"{signal.Signals(number).name}: stopping (running work is cancelled and saved)…", file=sys.stderr, flush=True
    )
    unfinished = shut_down(demo)
    if unfinished:
        print(f"stopped without waiting longer for: {', '.join(unfinished)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is saved and the database closed. os._exit skips the interpreter's teardown, which would
    # wait for any thread still going (a model load) and finalize llama.cpp models under threads using them.
    os._exit(0)


if __name__ == "__main__":
    main()
