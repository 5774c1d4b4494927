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

from testkit import CHROMIUM, browser_api, serve_app  # noqa: E402

# The tiny test models are dominated by per-op overhead, where a second thread only
# adds synchronisation; the integration tests on the real pair ask for two themselves.
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def record():
    """One real LongLaMP review record (the shared data where present, else the bundled sample), for the
    tests on real models."""
    from specsteer.data.datasets import load_records
    from specsteer.data.sources import bundled_sample_path, shared_data_path

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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A report of a test on PostgreSQL names the server: the summary below counts them from the reports, which
    reach the main process from pytest-xdist's workers (where the tests were collected) as they are."""
    report = yield
    if item.nodeid in item.config.stash.get(_ON_POSTGRESQL, set()):
        report.user_properties.append(("postgresql", item.config.stash.get(_POSTGRES_VERSION, "no server")))
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line saying how the tests on PostgreSQL went, so a run (CI's log) shows they ran and did not skip."""
    outcomes: dict[str, set[str]] = {}
    servers: set[str] = set()
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, ()):
            server = dict(getattr(report, "user_properties", ())).get("postgresql")
            if server is not None:
                outcomes.setdefault(outcome, set()).add(report.nodeid)
                servers.add(server)
    if not outcomes:
        return
    tests = len(set().union(*outcomes.values()))
    counts = ", ".join(f"{len(ids)} {outcome}" for outcome, ids in outcomes.items())
    terminalreporter.write_line(f"on PostgreSQL ({', '.join(sorted(servers))}): {tests} test(s), {counts}")


# --------------------------------------------------------------------------- workers (pytest-xdist)

# scripts/test.sh runs the suite on several workers (`-n N --dist loadfile`), each module whole on one worker so its
# module-scoped fixtures (an app server, a real pair, a Ray cluster) are built once. The real-model tier
# (tests/integration) and the vLLM modules are one unit on one worker, scheduled first: it is the suite's long pole,
# and the other workers drain every other module meanwhile. One unit, because on CI's 2 cores they only contend:
# measured from fresh clones, the whole suite took 20 min 31 s with them together, 25 min 52 s with the tier cut in two
# by runtime (both halves do two-thread matrix work), 24 min 04 s with the vLLM modules on the other worker (vLLM's
# engine processes beside a real pair drove the load average to 14); one unit also holds one real pair at a time (the
# default pair in fp32 is about 8 GB; CI's machine has 24 GiB). The modules that read the GPU cost model's dry run (a
# session fixture of about a minute) share one worker, so it runs once. (pytest-xdist's own `loadgroup` would say
# this with marks, but under pytest 9 it leaves the node ids, and so the groups, as they were.)
REAL_MODEL_UNIT = "real-models"
WORKER_GROUPS = {
    REAL_MODEL_UNIT: ("tests/integration/", "tests/cloud/test_vllm_cloud.py", "tests/cloud/test_vllm_judge.py"),
    "gpu-costs-dry-run": ("tests/benchmarks/test_engine_bench.py", "tests/evaluation/test_gpu_costs.py"),
}


def worker_group(module: str) -> str:
    """The unit of work a test module (its path from the repository's root) belongs to: a shared group, else
    itself."""
    for group, prefixes in WORKER_GROUPS.items():
        if module.startswith(prefixes):
            return group
    return module


MAX_TEST_WORKERS = 4  # each worker imports torch and builds its own tiny pairs: past four, memory, not cores, binds


def worker_count() -> int:
    """How many pytest-xdist workers a run without `-n` gets: one per core this process may use, at most
    ``MAX_TEST_WORKERS``, or ``SPECSTEER_TEST_WORKERS``; 0 (this process) below two."""
    workers = int(os.environ.get("SPECSTEER_TEST_WORKERS") or len(os.sched_getaffinity(0)))
    workers = min(workers, MAX_TEST_WORKERS)
    return workers if workers >= 2 else 0


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns the worker count into worker processes
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A run of the configured test paths (plain `pytest`, `bash scripts/test.sh`) spreads its modules over
    :func:`worker_count` workers; naming tests, or `-n`, `--pdb`, `--collect-only`, keeps pytest's own choice."""
    if (
        config.pluginmanager.hasplugin("xdist")  # the GPU machines' pytest runs without it
        and config.option.numprocesses is None
        and config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and "PYTEST_XDIST_WORKER" not in os.environ
        and not config.getoption("usepdb")
        and not config.getoption("collectonly")
    ):
        config.option.numprocesses = worker_count()
        config.option.dist = "loadfile" if config.option.numprocesses else "no"


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, which the GPU machines' pytest runs without
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None  # any other distribution asked for on the command line is pytest-xdist's own
    from xdist.scheduler import LoadFileScheduling

    class ModulesInGroups(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid.split("::", 1)[0])

        def _assign_work_unit(self, node) -> None:
            # The longest unit first, whatever its number of tests: the run ends when its longest unit does.
            if REAL_MODEL_UNIT in self.workqueue:
                self.workqueue.move_to_end(REAL_MODEL_UNIT, last=False)
            super()._assign_work_unit(node)

    return ModulesInGroups(config, log)


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    """The app served in-process on a free loopback port, with the tiny test pair and a fresh
    database: yields (url, data directory)."""
    with serve_app(tmp_path_factory.mktemp("app-data")) as served:
        yield served.url, served.data


@pytest.fixture
def evaluate_on_tiny(pair, monkeypatch):
    """``specsteer evaluate --pairing tiny-test`` runs on the session's tiny ``pair`` (built once)."""
    from specsteer.cli import evaluate

    monkeypatch.setattr(evaluate, "shared_tiny_pair", lambda: pair)


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


# --------------------------------------------------------------------------- browser tests


@pytest.fixture(scope="module")
def chromium():
    """Debian's Chromium through Playwright (never ``playwright install``); the test is skipped without it."""
    sync_api = browser_api()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
        )
        yield browser
        browser.close()
