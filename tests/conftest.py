"""Shared test settings: modest CPU use and no model-hub traffic."""

import os
import socket

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


def force_drafts(monkeypatch, ids) -> None:
    """The Edge's Specialist drafts ``ids`` first (as if it copied them from the history), then drafts as it
    would: what a test of the history that crossed needs from random tiny models."""
    from specsteer.edge import session

    real = session.drafting
    forced = list(ids)

    def drafting(stream, k, *args, **kwargs):
        if not forced:
            yield from real(stream, k, *args, **kwargs)
            return
        for _ in range(min(k, len(forced))):
            row = stream.predict(1)[0]
            token = forced.pop(0)
            stream.append([token])
            yield token, row

    monkeypatch.setattr(session, "drafting", drafting)


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


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    """The app served in-process on a free loopback port, with the tiny test pair and a fresh
    database: yields (url, data directory)."""
    import storage
    from specsteer.service import pairings

    data = tmp_path_factory.mktemp("app-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(pairings.TEST_PAIR_ENV, "tiny")
        patch.setenv("SPECSTEER_DATA_DIR", str(data))
        patch.delenv("DATABASE_URL", raising=False)
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
        storage.reset_engines()
        import app

        demo = app.build_app()
        port = _free_port()
        demo.launch(
            prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **app.launch_options()
        )
        try:
            yield f"http://127.0.0.1:{port}/", data
        finally:
            demo.close()
            storage.reset_engines()


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
