"""The engine's host work per round outside the model passes, Edge and Cloud apart, on this CPU.

Everything a generation does besides computing logits costs time on the host: the Python loop, sampling
and top-k over the whole vocabulary, the ratio test and steering, encoding and decoding frames, cropping
the KV caches, emitting events. The deployment profiles charge it per logits row a pass hands to the
host and per message sent, on the side that does it (``specsteer.evaluation.deployment.HostOverhead``); this script measures those charges.

How: each method runs through the real engine and an in-process Cloud service. Every model pass
(``Sequence.extend``, which also hands the logits to the host) is timed and attributed to the Edge or the
Cloud; so is every call into the Cloud's transport (the service decoding the frame, running its passes,
testing, encoding the answer). Per generation::

    Cloud host = time inside the Cloud's transport - the Cloud's passes
    Edge host  = the generation's time - time inside the Cloud's transport - the Edge's passes

Times are the thread's CPU time (``time.thread_time``; torch runs on one thread here, so every
computation is on the measuring thread): on a shared machine wall time also counts the waits for a core,
which the deployment would not pay. Wall times are recorded beside them. The models are tiny (hidden size
64) with the real output width (151,936 rows: Qwen2.5's and Qwen3's), so every full-vocabulary operation
costs what it costs on the real pair, while the passes themselves are excluded anyway. ``--pairing``
runs a real pair instead (its passes are excluded the same way).

Per side a least-squares fit over every generation of the methods the charge model covers (host seconds
= a * logits rows handed to the host + b * messages sent, rows counted as the replay counts them) gives the
profiles' numbers; each method's own per-round figures and
the fit's error on them are in the JSON. ``costeer`` is measured but left out of the fit: its Cloud's
iterative refinement is host work per round that the per-row/per-message charge does not describe.

    python benchmarks/host_overhead.py [--tokens 64] [--repeats 5] [--out benchmarks/results/host_overhead.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from specsteer.cloud.in_process import InProcessCloud  # noqa: E402
from specsteer.engine.decode_config import DecodeConfig  # noqa: E402
from specsteer.engine.generate import collect, generate_ids  # noqa: E402
from specsteer.evaluation.deployment import host_rows  # noqa: E402
from specsteer.method.catalog import METHOD_INFO  # noqa: E402
from specsteer.method.events import EDGE_STREAM  # noqa: E402
from specsteer.protocol.link import Reply  # noqa: E402
from specsteer.protocol.wire import DOWNLINK, UPLINK  # noqa: E402
from specsteer.runtimes.machine import machine_info  # noqa: E402

SCHEMA = "specsteer.host_overhead/1"
REAL_VOCAB = 151_936  # the output rows of Qwen2.5 and Qwen3 models
FITTED_METHODS = ("specsteer", "sd", "lightcosteer", "llm", "slm+")
DEFAULT_METHODS = (*FITTED_METHODS, "costeer")
EDGE, CLOUD = "edge", "cloud"


@dataclass
class Meter:
    """CPU and wall seconds of the model passes per side, and of the calls into the Cloud."""

    side: str = EDGE
    passes: dict[str, int] = field(default_factory=lambda: {EDGE: 0, CLOUD: 0})
    pass_cpu: dict[str, float] = field(default_factory=lambda: {EDGE: 0.0, CLOUD: 0.0})
    pass_wall: dict[str, float] = field(default_factory=lambda: {EDGE: 0.0, CLOUD: 0.0})
    cloud_cpu: float = 0.0
    cloud_wall: float = 0.0

    @contextlib.contextmanager
    def in_cloud(self):
        """Time a call into the Cloud; passes inside it are the Cloud's."""
        outer = self.side
        self.side = CLOUD
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            yield
        finally:
            if outer == EDGE:  # a nested call is already counted by the outer one
                self.cloud_cpu += time.thread_time() - cpu
                self.cloud_wall += time.perf_counter() - wall
            self.side = outer

    def timed_pass(self, extend):
        def timed(sequence, ids, rows):
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return extend(sequence, ids, rows)
            finally:
                self.passes[self.side] += 1
                self.pass_cpu[self.side] += time.thread_time() - cpu
                self.pass_wall[self.side] += time.perf_counter() - wall

        return timed


class TimedTransport:
    """A transport whose every call into the Cloud is timed (streamed frames one by one)."""

    def __init__(self, inner, meter: Meter):
        self.inner = inner
        self.meter = meter

    def info(self):
        with self.meter.in_cloud():
            return self.inner.info()

    def exchange(self, frame: bytes) -> Reply:
        with self.meter.in_cloud():
            reply = self.inner.exchange(frame)
        return Reply(self._frames(reply.frames), reply.report)

    def _frames(self, frames):
        iterator = iter(frames)
        while True:
            with self.meter.in_cloud():
                arrival = next(iterator, None)
            if arrival is None:
                return
            yield arrival

    def close_session(self, session: bytes):
        with self.meter.in_cloud():
            return self.inner.close_session(session)

    def edge_ready(self, session: bytes) -> None:
        with self.meter.in_cloud():
            self.inner.edge_ready(session)


class TimedCloud:
    def __init__(self, pair, meter: Meter):
        self.cloud = InProcessCloud(pair)
        self.meter = meter

    def transport(self):
        return TimedTransport(self.cloud.transport(), self.meter)


def instrument(meter: Meter) -> None:
    """Time every model pass of both runtimes (their ``extend``, logits handed to the host included)."""
    from specsteer.runtimes.base import TransformersSequence

    classes = [TransformersSequence]
    with contextlib.suppress(ImportError):
        from specsteer.runtimes.llamacpp import LlamaCppSequence

        classes.append(LlamaCppSequence)
    for cls in classes:
        cls.extend = meter.timed_pass(cls.extend)  # type: ignore[method-assign]


def build_pair(args):
    if args.pairing:
        from specsteer.models.loading import load_pair

        return load_pair(args.pairing, runtime=args.runtime)
    from specsteer.models.tiny import tiny_pair

    return tiny_pair(specialist_vocab=args.vocab, generalist_vocab=args.vocab)


def prompt_ids(pair, text: str, tokens: int) -> list[int]:
    """A chat prompt of about ``tokens`` ids: ``text`` repeated."""
    from specsteer.engine.request import chat_ids

    repeats = max(1, tokens // len(pair.tokenizer(text + " ")["input_ids"]))
    return chat_ids(pair.tokenizer, " ".join([text] * repeats), pair.chat)


def one_generation(pair, meter: Meter, config: DecodeConfig, plain: list[int], private: list[int]) -> dict:
    pair.clear_prefix_caches()  # every generation reads its prompts: no reuse across runs
    before = (dict(meter.passes), dict(meter.pass_cpu), dict(meter.pass_wall), meter.cloud_cpu, meter.cloud_wall)
    cpu, wall = time.thread_time(), time.perf_counter()
    _, finished = collect(generate_ids(pair, plain, private, config, cloud=TimedCloud(pair, meter)))
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    passes = {side: meter.passes[side] - before[0][side] for side in (EDGE, CLOUD)}
    pass_cpu = {side: meter.pass_cpu[side] - before[1][side] for side in (EDGE, CLOUD)}
    pass_wall = {side: meter.pass_wall[side] - before[2][side] for side in (EDGE, CLOUD)}
    cloud_cpu, cloud_wall = meter.cloud_cpu - before[3], meter.cloud_wall - before[4]
    stats = finished.stats
    device_only = METHOD_INFO[config.method].device_only
    trace = stats.trace
    sent = {
        EDGE: sum(1 for step in trace if step.kind == "message" and step.who == UPLINK),
        CLOUD: sum(1 for step in trace if step.kind == "message" and step.who == DOWNLINK),
    }
    rows = {EDGE: 0, CLOUD: 0}  # logits rows handed to the host, counted as the replay charges them
    seen: set[str] = set()
    for step in trace:
        if step.kind == "forward":
            rows[EDGE if device_only or step.who == EDGE_STREAM else CLOUD] += host_rows(step, step.who not in seen)
            seen.add(step.who)
    return {
        "method": config.method,
        "new_tokens": stats.new_tokens,
        "rounds": stats.rounds,
        "acceptance": stats.acceptance_rate,
        "passes": passes,
        "rows": rows,
        "messages_sent": sent,
        "cpu_s": cpu,
        "wall_s": wall,
        "host_cpu_s": {EDGE: cpu - cloud_cpu - pass_cpu[EDGE], CLOUD: cloud_cpu - pass_cpu[CLOUD]},
        "host_wall_s": {EDGE: wall - cloud_wall - pass_wall[EDGE], CLOUD: cloud_wall - pass_wall[CLOUD]},
        "pass_cpu_s": pass_cpu,
    }


def steps_of(run: dict) -> int:
    """What one of this method's rounds is: a speculative round, or a token where every token is one."""
    return run["rounds"] or run["new_tokens"]


def fit_side(runs: list[dict], side: str, key: str = "host_cpu_s") -> dict:
    """host = per_row * logits rows + per_message * messages sent, least squares, both charges >= 0."""
    design = np.array([[r["rows"][side], r["messages_sent"][side]] for r in runs], dtype=float)
    target = np.array([r[key][side] for r in runs], dtype=float)
    per_row, per_message = (float(v) for v in _nonnegative_lstsq(design, target))
    return {"per_row_s": per_row, "per_message_s": per_message, "generations": len(runs)}


def _nonnegative_lstsq(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    solution, *_ = np.linalg.lstsq(design, target, rcond=None)
    if (solution >= 0).all():
        return solution
    best = None
    for column in range(design.shape[1]):  # one charge at 0: fit the other alone
        only = np.zeros(design.shape[1])
        denominator = float(design[:, column] @ design[:, column])
        only[column] = max(0.0, float(design[:, column] @ target) / denominator) if denominator else 0.0
        error = float(((design @ only - target) ** 2).sum())
        if best is None or error < best[0]:
            best = (error, only)
    assert best is not None
    return best[1]


def method_summary(runs: list[dict], fits: dict) -> dict:
    """Median host seconds per round of each side, and what the fitted charges give for the same runs."""
    accepted = [r["acceptance"] for r in runs if r["acceptance"] is not None]
    per_round = {side: [r["host_cpu_s"][side] / steps_of(r) for r in runs] for side in (EDGE, CLOUD)}
    wall_per_round = {side: [r["host_wall_s"][side] / steps_of(r) for r in runs] for side in (EDGE, CLOUD)}
    fitted = {
        side: [
            (fits[side]["per_row_s"] * r["rows"][side] + fits[side]["per_message_s"] * r["messages_sent"][side])
            / steps_of(r)
            for r in runs
        ]
        for side in (EDGE, CLOUD)
    }
    return {
        "generations": len(runs),
        "round": "speculative round" if runs[0]["rounds"] else "token",
        "rounds_median": statistics.median(steps_of(r) for r in runs),
        "acceptance_median": statistics.median(accepted) if accepted else None,
        "host_cpu_ms_per_round": {side: 1e3 * statistics.median(v) for side, v in per_round.items()},
        "host_wall_ms_per_round": {side: 1e3 * statistics.median(v) for side, v in wall_per_round.items()},
        "fitted_ms_per_round": {side: 1e3 * statistics.median(v) for side, v in fitted.items()},
        "rows_per_round": {side: statistics.median(r["rows"][side] / steps_of(r) for r in runs) for side in fits},
        "messages_per_round": {
            side: statistics.median(r["messages_sent"][side] / steps_of(r) for r in runs) for side in fits
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    parser.add_argument("--tokens", type=int, default=64, help="max new tokens per generation")
    parser.add_argument("--repeats", type=int, default=5, help="generations per method")
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--private-tokens", type=int, default=256, help="the Edge's prompt length")
    parser.add_argument("--plain-tokens", type=int, default=64, help="the Cloud's prompt length")
    parser.add_argument("--vocab", type=int, default=REAL_VOCAB, help="output rows of the tiny models")
    parser.add_argument("--pairing", default=None, help="a real pairing instead of the tiny models")
    parser.add_argument("--runtime", default="llama.cpp", help="the real pairing's runtime")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: every computation on this thread)")
    parser.add_argument("--out", default=None, help="write the JSON here (default: print it)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    load_before = os.getloadavg()
    started = time.time()
    meter = Meter()
    instrument(meter)
    pair = build_pair(args)
    plain = prompt_ids(pair, "Write a short review of a fountain pen.", args.plain_tokens)
    private = prompt_ids(pair, "Past review: smooth nib, bold colour, I love it.", args.private_tokens)
    configs = {
        m: DecodeConfig(method=m, alpha=args.alpha, draft_len=args.draft_len, max_new_tokens=args.tokens)
        for m in methods
    }
    for config in configs.values():  # warm-up, untimed: first calls allocate and compile
        one_generation(pair, meter, replace(config, max_new_tokens=4), plain, private)
    runs: list[dict] = []
    for _ in range(args.repeats):  # interleaved: drift in the machine's load hits every method alike
        for method in methods:
            runs.append(one_generation(pair, meter, configs[method], plain, private))
            print(f"{method}: {runs[-1]['new_tokens']} tokens, {runs[-1]['cpu_s']:.2f} s CPU", file=sys.stderr)
    fitted_runs = [r for r in runs if r["method"] in FITTED_METHODS]
    fits = {side: fit_side(fitted_runs, side) for side in (EDGE, CLOUD)}
    fits_wall = {side: fit_side(fitted_runs, side, "host_wall_s") for side in (EDGE, CLOUD)}
    result = {
        "schema": SCHEMA,
        "command": " ".join(["python benchmarks/host_overhead.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine_info().to_dict(),
        "platform": platform.platform(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds": time.time() - started,
        "models": args.pairing or f"tiny random Qwen2 (hidden 64, 2 layers), {args.vocab} output rows, fp32",
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "timing": "thread CPU time (time.thread_time), torch on one thread; wall time beside it",
        "fit": {"methods": list(FITTED_METHODS), **fits},
        "fit_wall": fits_wall,
        "methods": {m: method_summary([r for r in runs if r["method"] == m], fits) for m in methods},
        "runs": runs,
    }
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
