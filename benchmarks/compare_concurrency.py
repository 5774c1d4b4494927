"""Compare's outputs one after another or side by side: the wall time of each on this machine.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/compare_concurrency.py [--tokens 48] [--repeats 3]

Compare runs its methods' outputs one after another (service.generation). Whether running them side by
side (one thread each, on the same loaded pair, as concurrent visitors do) would finish sooner depends on
the cores: on a machine the models already keep busy, threads only share them. This times both on the tiny
fp32 pair (specsteer.models.tiny) for SpecSteer, SLM+ and LLM, alternating sequential and concurrent
rounds in one run (and sequential with torch limited to one thread, which separates the side by side's gain
from the cost of torch's two-thread passes on a busy machine; the outputs must be the same tokens), and writes benchmarks/results/compare_concurrency.json with the medians, the ratio
concurrent / sequential, the CPU count, torch's threads and the load average when taken.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from specsteer.engine.decode_config import DecodeConfig  # noqa: E402
from specsteer.engine.generate import collect, generate_ids  # noqa: E402
from specsteer.models.tiny import tiny_pair  # noqa: E402

RESULT = Path(__file__).resolve().parent / "results" / "compare_concurrency.json"
METHODS = ("specsteer", "slm+", "llm")


def one(pair, prompts: tuple[list[int], list[int]], method: str, tokens: int) -> list[int]:
    return collect(generate_ids(pair, *prompts, DecodeConfig(method=method, max_new_tokens=tokens)))[1].token_ids


def sequential(pair, prompts, tokens: int, outputs: dict[str, list[int]]) -> float:
    started = time.perf_counter()
    for method in METHODS:
        outputs[method] = one(pair, prompts, method, tokens)
    return time.perf_counter() - started


def concurrent(pair, prompts, tokens: int, outputs: dict[str, list[int]]) -> float:
    errors: list[BaseException] = []

    def run(method: str) -> None:
        try:
            outputs[method] = one(pair, prompts, method, tokens)
        except BaseException as error:  # reported below: a failed thread must not pass for a fast one
            errors.append(error)

    threads = [threading.Thread(target=run, args=(method,)) for method in METHODS]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    pair = tiny_pair(seed=0, generalist_seed=1)
    plain = pair.tokenizer.encode("Write a short review of a coffee grinder.")
    prompts = (plain, pair.tokenizer.encode("History: I drink espresso every morning. ") + plain)
    threads = torch.get_num_threads()
    sequential(pair, prompts, 4, {})  # warm
    times: dict[str, list[float]] = {"sequential": [], "sequential_1_thread": [], "concurrent": []}
    same_outputs = True
    for _ in range(args.repeats):
        one_by_one: dict[str, list[int]] = {}
        side_by_side: dict[str, list[int]] = {}
        times["sequential"].append(sequential(pair, prompts, args.tokens, one_by_one))
        # torch's own threads off: tells the cost of its 2-thread passes on a busy machine from the side by side's
        torch.set_num_threads(1)
        times["sequential_1_thread"].append(sequential(pair, prompts, args.tokens, {}))
        torch.set_num_threads(threads)
        times["concurrent"].append(concurrent(pair, prompts, args.tokens, side_by_side))
        same_outputs = same_outputs and one_by_one == side_by_side  # greedy: the very same tokens
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    result = {
        "pair": "tiny-test fp32",
        "methods": list(METHODS),
        "tokens": args.tokens,
        "repeats": args.repeats,
        "seconds": times,
        "median_s": medians,
        "ratio_concurrent_over_sequential": medians["concurrent"] / medians["sequential"],
        "ratio_concurrent_over_sequential_1_thread": medians["concurrent"] / medians["sequential_1_thread"],
        "same_outputs": same_outputs,
        "cpus": os.cpu_count(),
        "torch_threads": threads,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
