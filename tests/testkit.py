"""What tests share besides fixtures: helpers and request values, imported by name (``from testkit import ...``).

They live here, not in a conftest.py, because pytest imports every conftest.py under the same module name: a
``from testkit import`` resolves to whichever conftest was imported last (tests/gpu's, in a whole run).
"""

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specsteer.models.tiny import TEST_PAIRING_ID


def canary_request(record):
    """(canary, a prepared review request whose history carries the canary in one retrieved item): what a
    privacy test on real models checks never reaches the Cloud."""
    from specsteer.data.history import HistoryItem
    from specsteer.engine.request import Request, prepare

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
        port = free_port()
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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


LLAMA_REQUIRED_ENV = "SPECSTEER_REQUIRE_LLAMA_CPP"


def require_llamacpp() -> None:
    """Skip a llama.cpp test where llama-cpp-python is not built; fail instead where the run says it
    must be there (CI sets SPECSTEER_REQUIRE_LLAMA_CPP=1, so a broken build cannot pass as skips)."""
    from specsteer.runtimes import llamacpp_build

    usable, reason = llamacpp_build.status()
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


PERSONA = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "assets", "samples", "persona_software_developer.json"
)


def generate_cli(capsys, *arguments: str) -> tuple[int, str, str]:
    """``specsteer generate`` on the tiny test pair for a bundled persona's CoGenesis task, with ``arguments``
    (the method, the token budget, ...) added: its exit status, stdout and stderr."""
    from specsteer import cli

    code = cli.main(
        [
            "generate",
            "--pairing",
            "tiny-test",
            "--history",
            PERSONA,
            "--task",
            "cogenesis",
            "--input",
            "Write an article on learning Spanish.",
            *arguments,
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


RAY_REQUIRED_ENV = "SPECSTEER_REQUIRE_RAY"


def require_ray() -> None:
    """Skip a test of grids on Ray where Ray (the optional extra, requirements-ray.txt) is not installed; fail
    instead where the run says it must be there (CI sets SPECSTEER_REQUIRE_RAY=1: scripts/setup.sh --dev
    installs the extra)."""
    from specsteer.evaluation.grid.ray_executor import ray_status

    usable, reason = ray_status()
    if usable:
        return
    if os.environ.get(RAY_REQUIRED_ENV, "").strip() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


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


CHROMIUM = Path("/usr/bin/chromium")  # Debian's; never ``playwright install``
APP_VIEWPORT = {"width": 1400, "height": 900}


def browser_api():
    """Playwright's sync API, for a browser test module to call at import: skips the module without Debian's
    Chromium or the playwright package (the ``chromium`` fixture in conftest.py launches it)."""
    if not CHROMIUM.exists():
        pytest.skip(
            "Debian's Chromium is not installed at /usr/bin/chromium (apt-get install chromium)",
            allow_module_level=True,
        )
    return pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")


@contextmanager
def app_page(browser, url: str, wait_ms: float) -> Iterator[Any]:
    """A page of the app at ``url`` in a fresh 1400×900 browser context, once its Generate button is there;
    the context is closed after."""
    context = browser.new_context(viewport=APP_VIEWPORT)
    try:
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector("#generate-button", timeout=wait_ms)
        yield page
    finally:
        context.close()


SCREENS = Path(__file__).resolve().parents[1] / "test-artifacts" / "screens"


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


def broken_header_words(page, table: str) -> list[str]:
    """Header words of ``table`` laid out on more than one line (a word split mid-way, or a letter a line)."""
    return page.evaluate(
        """(table) => {
        const broken = [];
        for (const header of document.querySelectorAll(table + ' th')) {
            const walker = document.createTreeWalker(header, NodeFilter.SHOW_TEXT);
            for (let text = walker.nextNode(); text; text = walker.nextNode()) {
                let start = 0;
                for (const word of text.textContent.split(' ')) {
                    const range = document.createRange();
                    range.setStart(text, start);
                    range.setEnd(text, start + word.length);
                    const lines = new Set([...range.getClientRects()].map(rect => Math.round(rect.top)));
                    if (word.trim() && lines.size > 1) broken.push(word);
                    start += word.length + 1;
                }
            }
        }
        return broken;
    }""",
        table,
    )


def type_until_kept(page, box, value: str) -> None:
    """Type ``value`` into ``box`` and leave it, again until it holds (a loaded machine may render the box
    again meanwhile, as an accordion's first opening does its children)."""
    for _attempt in range(5):
        box.fill(value)
        box.press("Tab")
        page.wait_for_timeout(500)
        if box.input_value() == value:
            return
    raise AssertionError(f"the box did not keep {value!r}")


def set_rtt(page, value: str) -> None:
    """The round-trip time in the advanced settings (opened if closed), typed until it holds."""
    box = page.locator("#rtt-ms input").first
    if not box.is_visible():
        page.get_by_text("Sampling and advanced settings").click()
    type_until_kept(page, box, value)


def prompt_rows(model, prompt: list[int], continuation: list[int]):
    """(the rows of a prompt read in one pass keeping its last 2, the rows of a continuation read after it) on a
    fresh sequence of ``model``: what the prompt hand-off tests compare between a reader and llama.cpp."""
    sequence = model.new_sequence(len(prompt) + len(continuation) + 8)
    try:
        first = sequence.extend(prompt, 2)
        after = sequence.extend(continuation, len(continuation))
        assert sequence.tokens == prompt + continuation
    finally:
        sequence.close()
    return first, after
