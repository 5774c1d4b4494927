"""The Cloud reads its prompts while the Edge reads its own: ``InProcessCloud(read_ahead=True)``
gives the same tokens as reading them with the first Draft, on every method; the read is one pass per
Cloud stream, placed before the first Draft. Tiny fp32 random pairs, prefix caches cleared between runs."""

from __future__ import annotations

import threading
import time

import pytest

from specsteer.cloud.in_process import InProcessCloud
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.events import GENERALIST_STREAM, GENERIC_STREAM


def prompts(pair):
    plain = pair.tokenizer.encode("Write about the weather and the sea, and the boats on it.")
    private = pair.tokenizer.encode("History: I love long walks and strong coffee. ") + plain
    return plain, private


def run(pair, read_ahead: bool, **config):
    pair.clear_prefix_caches()  # no run may find another's prompt cached
    config.setdefault("max_new_tokens", 24)
    cloud = InProcessCloud(pair, read_ahead=read_ahead)
    return collect(generate_ids(pair, *prompts(pair), DecodeConfig(**config), cloud=cloud))


CASES = [
    dict(method="specsteer", alpha=0.1, draft_len=4),
    dict(method="specsteer", alpha=0.1, draft_len=3, sample=True, temperature=0.8, seed=3),
    dict(method="specsteer", exact=True, sample=True, seed=5),
    dict(method="sd", draft_len=4),
    dict(method="sd", draft_len=2, sample=True, seed=1),
    dict(method="lightcosteer"),
    dict(method="costeer", costeer_iters=3),
    dict(method="llm"),
    dict(method="llm+"),
]


@pytest.mark.parametrize("config", CASES, ids=lambda config: "-".join(str(value) for value in config.values()))
def test_reading_ahead_gives_the_same_tokens(pair, config):
    tokens, finished = run(pair, False, **config)
    ahead_tokens, ahead = run(pair, True, **config)
    assert ahead.token_ids == finished.token_ids and ahead.text == finished.text
    assert [(t.id, t.kind, t.round, t.text) for t in ahead_tokens] == [(t.id, t.kind, t.round, t.text) for t in tokens]
    # the ratios are the same up to fp32 rounding (the prompt is read in another pass shape)
    for a, b in zip(ahead_tokens, tokens):
        assert (a.ratio is None) == (b.ratio is None) and (
            a.ratio is None or a.ratio == pytest.approx(b.ratio, rel=1e-4)
        )


def test_each_cloud_stream_reads_its_prompt_in_one_pass_before_the_first_draft(pair):
    plain, _ = prompts(pair)
    _, finished = run(pair, True, method="specsteer", alpha=0.1, draft_len=4)
    _, sequential = run(pair, False, method="specsteer", alpha=0.1, draft_len=4)
    calls = finished.stats.forward_calls
    assert (
        calls[GENERALIST_STREAM] == finished.stats.rounds + 1 == sequential.stats.forward_calls[GENERALIST_STREAM] + 1
    )
    assert calls[GENERIC_STREAM] == finished.stats.rounds + 1
    trace = finished.stats.trace
    first_draft = next(i for i, step in enumerate(trace) if step.kind == "message" and step.who == "uplink" and i > 0)
    for stream in (GENERALIST_STREAM, GENERIC_STREAM):
        read = next(i for i, step in enumerate(trace) if step.kind == "forward" and step.who == stream)
        assert read < first_draft and trace[read].size == len(plain) - 1


class SlowModel:
    """A model whose every pass also sleeps ``seconds`` per token read (a CPU's prompt reading, the GIL
    released)."""

    def __init__(self, model, seconds: float) -> None:
        self._model, self._seconds = model, seconds

    def acquire(self, prompt, capacity):
        sequence = self._model.acquire(prompt, capacity)
        extend, seconds = sequence.extend, self._seconds

        def slow_extend(ids, rows):
            time.sleep(seconds * len(ids))
            return extend(ids, rows)

        sequence.extend = slow_extend
        return sequence

    def __getattr__(self, name):
        return getattr(self._model, name)


def test_the_cloud_reads_while_the_edge_reads(pair):
    """With 10 ms a token, the first verdict comes a prompt's reading sooner when the Cloud reads ahead:
    the Edge's prompt pass and the Cloud's overlap instead of following each other."""
    from dataclasses import replace

    slow = replace(pair, generalist=SlowModel(pair.generalist, 0.01))
    timings = {}
    for read_ahead in (False, True):
        pair.clear_prefix_caches()
        started = time.perf_counter()
        cloud = InProcessCloud(slow, read_ahead=read_ahead)
        config = DecodeConfig(method="specsteer", alpha=0.1, draft_len=1, max_new_tokens=1)
        slow_edge = replace(slow, specialist=SlowModel(pair.specialist, 0.01))
        collect(generate_ids(slow_edge, *prompts(pair), config, cloud=cloud))
        timings[read_ahead] = time.perf_counter() - started
    # sequential: the Edge's prompt, then the Generalist's (the shorter); ahead: the two at once, which saves
    # about the Generalist's
    cloud_prompt = 0.01 * len(prompts(pair)[0])
    assert timings[True] < timings[False] - 0.6 * cloud_prompt, timings
    assert threading.active_count() < 50
