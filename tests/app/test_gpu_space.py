"""The app on a ZeroGPU Space, a GPU Space and a CPU, without any of them: a fake ``spaces`` module (its
``GPU`` decorator records what it decorates and runs it as it is) and torch's CUDA queries monkeypatched.

On "ZeroGPU" the three model handlers are decorated with a duration read from the request, and still
work (here on the CPU, with the tiny pair); on a CPU nothing is decorated and nothing else changes."""

from __future__ import annotations

import functools
import inspect
import math
import pickle
import sys
import types

import pytest
import torch

import app
from specsteer.method.catalog import PRIVATE_METHODS
from specsteer.runtimes.placement import Placement
from specsteer.service import page
from specsteer.service.limits import PUBLIC_LIMITS
from testkit import widget_settings
from ui import gpu_space, pairs

MODEL_HANDLERS = ("generate", "compare", "evaluate", "campaign_generate")

pytestmark = pytest.mark.usefixtures("tiny_app")


def piped(value):
    """``value`` after crossing a pipe between processes, as ZeroGPU sends arguments and frames."""
    return pickle.loads(pickle.dumps(value))


class FakeSpaces(types.ModuleType):
    """What the app uses of ``spaces``: ``GPU(duration=...)`` returning a decorator. Each call is recorded;
    the decorated function runs in this process, its arguments and what it yields or returns pickled and
    unpickled on the way, as ZeroGPU's forked task sends them (a generator stays a generator)."""

    def __init__(self) -> None:
        super().__init__("spaces")
        self.decorated: list[tuple[object, object]] = []  # (function, duration)

    def GPU(self, task=None, *, duration=None, size=None):  # noqa: N802 -- the package's own name
        def decorate(function):
            self.decorated.append((function, duration))
            if inspect.isgeneratorfunction(function):

                @functools.wraps(function)
                def streamed(*args, **kwargs):
                    args, kwargs = piped((args, kwargs))
                    for frame in function(*args, **kwargs):
                        yield piped(frame)

                wrapper = streamed
            else:
                wrapper = functools.wraps(function)(lambda *args, **kwargs: piped(function(*piped(args), **kwargs)))
            wrapper.zerogpu_duration = duration  # type: ignore[attr-defined]
            return wrapper

        return decorate(task) if callable(task) else decorate


@pytest.fixture
def zero_gpu(monkeypatch):
    fake = FakeSpaces()
    monkeypatch.setitem(sys.modules, "spaces", fake)
    monkeypatch.setenv(gpu_space.ZERO_GPU_ENV, "true")
    return fake


def handlers(demo) -> dict:
    return {fn.api_name: fn.fn for fn in demo.fns.values() if fn.api_name in MODEL_HANDLERS}


@pytest.mark.parametrize(("value", "zero"), [("true", True), ("1", True), ("T", True), ("false", False), ("", False)])
def test_zero_gpu_is_read_as_the_spaces_package_reads_it(value, zero):
    assert gpu_space.zero_gpu_requested({gpu_space.ZERO_GPU_ENV: value}) is zero
    assert not gpu_space.zero_gpu_requested({})


def test_detect_tells_the_three_apart(monkeypatch, zero_gpu):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_space.detect({}) == gpu_space.SpaceHardware("cpu", Placement())
    zero = gpu_space.detect()
    assert zero.zero_gpu and zero.placement == Placement()  # the fake does not make torch report a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args, **kwargs: (8, 6))
    gpu = gpu_space.detect({})
    assert gpu == gpu_space.SpaceHardware("gpu", Placement("cuda", "bf16"))
    assert "cuda, bf16" in gpu.describe() and "cuda, bf16" in gpu_space.detect().describe()


def test_zero_gpu_without_the_spaces_package_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "spaces", None)  # import spaces raises ImportError
    with pytest.raises(RuntimeError, match="`spaces` package"):
        gpu_space.detect({gpu_space.ZERO_GPU_ENV: "true"})


def test_on_a_cpu_nothing_is_decorated(monkeypatch):
    monkeypatch.delenv(gpu_space.ZERO_GPU_ENV, raising=False)

    def work():
        return 1

    assert gpu_space.on_gpu(work, "generate") is work
    built = handlers(app.build_app(app.build_service()))
    assert set(built) == set(MODEL_HANDLERS)
    assert not any(hasattr(fn, "zerogpu_duration") for fn in built.values())


def test_the_budgets_follow_the_request_and_the_visitor_limits():
    budgets = gpu_space.budgets(public=True)
    tokens = PUBLIC_LIMITS.max_new_tokens
    assert budgets["generate"].seconds(64) == 30 + 7  # 30 s fixed, 0.1 s a token, rounded up
    assert budgets["generate"]() == budgets["generate"].seconds(tokens) == budgets["generate"].ceiling_s
    assert budgets["generate"].seconds(10**9) == budgets["generate"].seconds(tokens)  # clamped to the limit
    assert budgets["generate"].seconds("many") == budgets["generate"].seconds(float("nan")) == budgets["generate"]()
    compare = budgets["compare"]
    assert compare(None, "review", "input", ["slm+", "specsteer"], True, max_new_tokens=64) == 30 + 13
    assert compare.seconds(64) == 30 + math.ceil(6.4 * len(PRIVATE_METHODS))  # every method a comparison may run
    assert budgets["evaluate"]() == gpu_space.GRID_CEILING_S
    assert budgets["evaluate"](max_new_tokens=8) < gpu_space.GRID_CEILING_S
    assert budgets["campaign_generate"]("a-campaign", "token") == gpu_space.GRID_CEILING_S
    with pytest.raises(ValueError, match="no GPU budget"):
        gpu_space.on_gpu(lambda: None, "unknown", {gpu_space.ZERO_GPU_ENV: "1"})


def test_on_zero_gpu_the_model_handlers_are_decorated_and_still_work(zero_gpu):
    demo = app.build_app(app.build_service())
    built = handlers(demo)
    # Generate, Compare, a grid, and a campaign's generation (its button and the one after Create).
    assert len(zero_gpu.decorated) == len(MODEL_HANDLERS) + 1
    assert {budget.ceiling_s for _, budget in zero_gpu.decorated} >= {gpu_space.GRID_CEILING_S}
    assert all(isinstance(fn.zerogpu_duration, gpu_space.GpuBudget) for fn in built.values())
    assert all(inspect.isgeneratorfunction(fn) for fn in built.values())
    assert built["generate"].zerogpu_duration(max_new_tokens=24) == 30 + 3
    # Gradio still sees the handler's own parameters (the request is injected by name).
    assert "request" in inspect.signature(built["generate"]).parameters
    frames = list(
        built["generate"](
            page.read_sample("review"),
            "review",
            "Write a review of a power bank with great battery life",
            **widget_settings(pairs.TINY_PAIRING_ID, 12),
        )
    )
    assert "saved as generation" in frames[-1][0]
    # A comparison streams flat frames through the same pipe (positional methods and blind, as Gradio sends them).
    task_input = ("review", "Write a review of a power bank with great battery life")
    settings = widget_settings(pairs.TINY_PAIRING_ID, 6)
    assert built["compare"].zerogpu_duration(None, *task_input, ["slm", "specsteer"], True, **settings) == 30 + 2
    flat = list(built["compare"](page.read_sample("review"), *task_input, ["slm", "specsteer"], False, **settings))
    assert "Saved as comparison #" in flat[-1][0]


def test_a_gpu_space_builds_its_catalog_on_cuda(monkeypatch):
    monkeypatch.setattr(app, "SPACE_HARDWARE", gpu_space.SpaceHardware("gpu", Placement("cuda", "bf16")))
    assert app.build_service().pairs.placement == Placement("cuda", "bf16")


def test_on_zero_gpu_a_stop_says_the_gpu_task_ends(zero_gpu):
    from types import SimpleNamespace

    demo = app.build_app(app.build_service())
    stops = {
        fn.api_name: fn.fn for fn in demo.fns.values() if fn.api_name and fn.api_name.startswith(("stop", "cancel"))
    }
    assert set(stops) == {"stop_generate", "stop_compare", "cancel_evaluate"}
    page_request = SimpleNamespace(session_hash="a-page-with-nothing-running-here")
    for stop in stops.values():
        view = stop(request=page_request)
        assert gpu_space.GPU_TASK_STOPPED in view[0] and "Nothing of yours" not in view[0]


def test_on_a_cpu_a_stop_is_as_before(monkeypatch):
    monkeypatch.delenv(gpu_space.ZERO_GPU_ENV, raising=False)

    def stop():
        return ("status",)

    assert gpu_space.stop_on_gpu(stop) is stop


def test_zero_gpu_preloads_the_default_pairing_on_the_main_thread(zero_gpu):
    service = app.build_service()
    assert gpu_space.preload(service, pairs.TINY_PAIRING_ID) == f"{pairs.TINY_PAIRING_ID} loaded (transformers, fp32)"
    assert gpu_space.preload(service, "no-such-pairing").startswith("preload of no-such-pairing failed")
