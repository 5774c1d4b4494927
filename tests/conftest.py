"""Shared test settings: modest CPU use and no model-hub traffic."""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

# Tests must never reach a model hub; the offline pairing and tiny models cover loading.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402  (after the environment is set)

from testkit import serve_app  # noqa: E402

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


@pytest.fixture(scope="session")
def pair():
    """The tiny fp32 pair most tests decode with (seeds 0 and 1), built once per session; a module that needs
    another pair defines its own ``pair``. Shared, so no test may change it (LoRA tests build their own)."""
    from specsteer.models.tiny import tiny_pair

    return tiny_pair(seed=0, generalist_seed=1)


@pytest.fixture(scope="session")
def tiny_pair_56():
    """A second tiny fp32 pair (seeds 5 and 6), whose models disagree more often than ``pair``'s, built once."""
    from specsteer.models.tiny import tiny_pair

    return tiny_pair(seed=5, generalist_seed=6)


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


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    """The app served in-process on a free loopback port, with the tiny test pair and a fresh
    database: yields (url, data directory)."""
    with serve_app(tmp_path_factory.mktemp("app-data")) as served:
        yield served.url, served.data


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

    repo = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("gpu_costs") / "costs.json"
    command = [sys.executable, str(repo / "benchmarks" / "gpu_costs.py"), "--device", "cpu", "--tiny"]
    command += ["--pairs", "qwen3", "--threads", "1", "--max-seconds", "90", "--out", str(out)]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads(out.read_text())
