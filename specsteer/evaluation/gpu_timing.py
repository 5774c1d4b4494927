"""The harness of a timed run on an accelerator: the run's time budget and log, timing one call (CUDA events on
a GPU, the performance counter on the CPU) with warm-up and repetitions, the statistics kept of each measurement, the
device's description, and the result file rewritten as the run goes (what is measured survives a crash).

Shared by ``specsteer.evaluation.gpu_costs`` and ``benchmarks/engine_bench.py``. It imports only the standard
library (torch is passed in by the caller), so a bare GPU machine with the repository can use it.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# --------------------------------------------------------------------------- statistics


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(seconds: Sequence[float]) -> dict:
    return {
        "reps": len(seconds),
        "median_s": quantile(seconds, 0.5),
        "p90_s": quantile(seconds, 0.9),
        "min_s": min(seconds),
        "mean_s": sum(seconds) / len(seconds),
    }


# --------------------------------------------------------------------------- the clock


class Budget:
    """The whole run's time: measurements stop when it is spent."""

    def __init__(self, seconds: float):
        self.start = time.monotonic()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def spent(self) -> bool:
        return self.left() <= 0


def log(budget: Budget, message: str) -> None:
    print(f"[{budget.elapsed():7.1f}s] {message}", file=sys.stderr, flush=True)


class Timer:
    """Seconds of one call: CUDA events on a GPU (the device's own clock), perf_counter on the CPU."""

    def __init__(self, torch, device: str):
        self.torch = torch
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def time(self, call: Callable[[], object]) -> float:
        self.sync()  # nothing queued before the pass is charged to it
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        began = time.perf_counter()
        call()
        return time.perf_counter() - began


def repeat(
    timer: Timer,
    call: Callable[[], object],
    after: Callable[[], object],
    warmup: int,
    reps: int,
    min_reps: int,
    unit_seconds: float,
    budget: Budget,
) -> list[float]:
    """Time ``call`` up to ``reps`` times after ``warmup`` untimed calls, running ``after`` (untimed)
    after each; stop early once ``min_reps`` are done and ``unit_seconds`` passed, or once the budget
    is spent (a measurement that started always gets one timed call)."""
    for _ in range(warmup):
        call()
        after()
    timer.sync()
    began = time.monotonic()
    times: list[float] = []
    while len(times) < reps:
        if times and budget.spent():
            break
        if len(times) >= min_reps and time.monotonic() - began > unit_seconds:
            break
        times.append(timer.time(call))
        after()
    return times


# --------------------------------------------------------------------------- the device and the result file


def device_info(device: str, torch) -> dict:
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        properties = torch.cuda.get_device_properties(index)
        return {
            "kind": "cuda",
            "name": torch.cuda.get_device_name(index),
            "memory_gib": properties.total_memory / 2**30,
            "capability": list(torch.cuda.get_device_capability(index)),
            "cuda": torch.version.cuda,
        }
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"kind": "cpu", "name": name, "threads": torch.get_num_threads()}


def device_slug(info: dict, tiny: bool) -> str:
    """A short name for file names: ``h100`` for "NVIDIA H100 80GB HBM3", ``cpu`` or ``cpu_dryrun``."""
    if info["kind"] != "cuda":
        return "cpu_dryrun" if tiny else "cpu"
    words = [w for w in info["name"].lower().replace("-", " ").split() if w not in {"nvidia", "geforce", "tesla"}]
    slug = "".join(ch for ch in (words[0] if words else "cuda") if ch.isalnum())
    return slug + ("_dryrun" if tiny else "")


def write_result(result: dict, budget: Budget, out: str, final: bool) -> None:
    """Write ``result`` to ``out`` (through a temporary file, so a reader never sees half of it), with the time
    spent and whether the run has finished."""
    result["elapsed_s"] = budget.elapsed()
    result["finished"] = final
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    partial.replace(path)
