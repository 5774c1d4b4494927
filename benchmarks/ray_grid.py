"""A grid on Ray against the sequential runner, on the tiny fp32 pair: two workers against one, and Ray's cost per cell.

One local Ray cluster (``--cpus`` CPUs) serves every configuration, each run ``--repeats`` times in turn (the
configurations interleaved, so a change in the machine's load touches each alike):

* ``sequential``: ``run_grid_events`` in this process, torch on one thread;
* ``ray-1``: ``run_grid_on_ray`` with one worker of one CPU;
* ``ray-2``: two workers of one CPU each.

Each run is a new run name over the same records (the bundled review sample's records, repeated under new ids to
``--records``), timed from the first cell handed out (the ``running`` event) to the result: the models' loading
and warm-up are timed apart (``start_s``). Figures are ratios within this one run: ``two_workers_speedup`` =
median ray-1 / median ray-2 cell time, and ``ray_overhead_per_cell_ms`` = (median ray-1 - median sequential)
/ cells: what a cell costs on Ray beyond its generation (the hand-off to the worker, the result's return, the
driver's store), on one worker of the same single thread. The tiny pair's cells are short, so the overhead is
a larger share of them than of a real pair's; the cell count and the mean sequential cell time say how large.
On a loaded machine the wall ratios also measure how the kernel shares the CPUs between processes (two workers
get two shares): ``beyond_generation_per_cell_ms`` (each configuration's wall time per cell less the generation's
own seconds, one worker having one cell in flight at a time) isolates what Ray adds per cell from that.

    nice -n 5 python benchmarks/ray_grid.py [--records 8] [--max-new-tokens 32] [--repeats 3] \
        [--out benchmarks/results/ray_grid.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import storage  # noqa: E402
from specsteer.data.sources import bundled_sample_path  # noqa: E402
from specsteer.evaluation.grid import EvalResult, EvalSpec, GridProgress, run_grid_events  # noqa: E402
from specsteer.evaluation.grid.ray_executor import RayCluster, run_grid_on_ray  # noqa: E402
from specsteer.models.tiny import TEST_PAIRING_ID, shared_tiny_pair  # noqa: E402
from specsteer.runtimes.machine import machine_info  # noqa: E402

SCHEMA = "specsteer.ray_grid/1"
CONFIGS = {
    "sequential": None,
    "ray-1": RayCluster(workers=1, worker_cpus=1),
    "ray-2": RayCluster(workers=2, worker_cpus=1),
}


def records_file(count: int, directory: Path) -> Path:
    """The review sample's records repeated under new ids up to ``count``."""
    sample = [json.loads(line) for line in bundled_sample_path("review").read_text().splitlines() if line.strip()]
    path = directory / "records.jsonl"
    with path.open("w") as file:
        for index in range(count):
            record = dict(sample[index % len(sample)], id=f"bench-review-{index}")
            file.write(json.dumps(record) + "\n")
    return path


def timed(events) -> tuple[float, float, EvalResult]:
    """(seconds before the first cell, seconds from the first cell to the result, the result)."""
    started = time.perf_counter()
    first = None
    for event in events:
        if isinstance(event, GridProgress) and event.stage == "running" and first is None:
            first = time.perf_counter()
        if isinstance(event, EvalResult):
            assert first is not None and event.status == "finished" and not event.failures, event
            return first - started, time.perf_counter() - first, event
    raise RuntimeError("no result")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/ray_grid.json")
    args = parser.parse_args()

    import ray

    torch.set_num_threads(1)
    load_before = os.getloadavg()
    directory = Path(tempfile.mkdtemp(prefix="ray-grid-bench-"))
    spec = EvalSpec(
        data=str(records_file(args.records, directory)),
        task="review",
        methods=("llm", "slm+", "specsteer"),
        alphas=(0.5,),
        max_new_tokens=args.max_new_tokens,
        retrieval_k=1,
        pairing=TEST_PAIRING_ID,
        dtype="fp32",
    )
    store = storage.SqlRunStore(f"sqlite:///{directory / 'runs.db'}")
    pair = shared_tiny_pair()
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="warning")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in CONFIGS}
    outputs: dict[str, dict[str, str]] = {}
    try:
        for repeat in range(args.repeats):
            for name, cluster in CONFIGS.items():
                named = EvalSpec(**{**asdict(spec), "run_name": f"{name}-{repeat}"})
                events = (
                    run_grid_events(named, store, pair=pair)
                    if cluster is None
                    else run_grid_on_ray(named, store, cluster, pair=pair)
                )
                start_s, cells_s, result = timed(events)
                generating = sum(cell.stats.seconds for cell in result.cells)
                runs[name].append(
                    {"start_s": round(start_s, 4), "cells_s": round(cells_s, 4), "generation_s": round(generating, 4)}
                )
                outputs.setdefault(name, {cell.key: cell.output for cell in result.cells})
                print(f"{name} #{repeat}: start {start_s:.2f} s, {len(result.cells)} cells {cells_s:.2f} s", flush=True)
    finally:
        ray.shutdown()
    cells = args.records * len(spec.points())
    median = {name: statistics.median(run["cells_s"] for run in rows) for name, rows in runs.items()}
    document = {
        "schema": SCHEMA,
        "command": "nice -n 5 python " + " ".join(sys.argv),
        "machine": asdict(machine_info()),
        "ray": ray.__version__,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "grid": {"records": args.records, "points": [point.label for point in spec.points()], "cells": cells},
        "max_new_tokens": args.max_new_tokens,
        "cluster_cpus": args.cpus,
        "runs": runs,
        "median_cells_s": median,
        "sequential_cell_ms": round(1000 * median["sequential"] / cells, 2),
        "two_workers_speedup": round(median["ray-1"] / median["ray-2"], 3),
        "ray_overhead_per_cell_ms": round(1000 * (median["ray-1"] - median["sequential"]) / cells, 2),
        # Per cell, the wall time beyond the generation's own (handing out, returning, scoring, storing): free of
        # how the machine's load shares the CPU between the processes, which the wall ratios above are not.
        "beyond_generation_per_cell_ms": {
            name: round(1000 * statistics.median(run["cells_s"] - run["generation_s"] for run in rows) / cells, 2)
            for name, rows in runs.items()
        },
        "same_outputs_as_sequential": all(outputs[name] == outputs["sequential"] for name in outputs),
    }
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps({key: document[key] for key in list(document)[-5:]}, indent=2))


if __name__ == "__main__":
    main()
