"""Load test: N concurrent Edges against one Cloud, for today's Cloud and the vLLM one.

Each Edge is a thread running real generations (``generate_ids`` with a RemoteCloud) on the pairing's
Specialist in this process; the Cloud is ``python -m specsteer cloud`` on a free loopback port, started
here for each engine and stopped by its process id. Measured per N: summed new tokens per second over
the wall time of the whole batch, the time of each round (one Draft's HTTP exchange, from the Edge), its
p50/p95, and refusals (503 busy). The engines' tokens computed per round come from the Cloud's log.

    python benchmarks/cloud_load.py --engines local,vllm --edges 1,2,4 --out results/cloud_load.json

Everything runs on this machine (both Clouds, vLLM's engines and every Edge share its cores): the
numbers say how each Cloud queues or batches, not what a GPU server would reach.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from specsteer.cloud.client import HttpTransport, RemoteCloud  # noqa: E402
from specsteer.cloud.process import start_cloud_process  # noqa: E402
from specsteer.engine.decode_config import DecodeConfig  # noqa: E402
from specsteer.engine.generate import collect, generate_ids  # noqa: E402
from specsteer.models.tiny import VLLM_PAIRING_ID, shared_test_pair  # noqa: E402
from specsteer.protocol import wire  # noqa: E402
from specsteer.protocol.link import CloudError  # noqa: E402


class TimedTransport(HttpTransport):
    """HTTP transport that notes how long each Draft's exchange took (a round, seen from the Edge)."""

    def __init__(self, remote, rounds: list[float], lock: threading.Lock):
        super().__init__(remote)
        self._rounds = rounds
        self._lock = lock

    def exchange(self, frame: bytes):
        started = time.perf_counter()
        reply = super().exchange(frame)
        if frame and frame[1:2] and _is_draft(frame):
            with self._lock:
                self._rounds.append(time.perf_counter() - started)
        return reply


def _is_draft(frame: bytes) -> bool:
    try:
        return isinstance(wire.decode(frame, wire.UPLINK), wire.Draft)
    except wire.FrameError:
        return False


class TimedCloud(RemoteCloud):
    def __init__(self, url: str, rounds: list[float], lock: threading.Lock):
        super().__init__(url, timeout_s=600.0)
        self._rounds = rounds
        self._lock = lock

    def transport(self):
        return TimedTransport(self, self._rounds, self._lock)


def run_edges(url: str, pair, edges: int, generations: int, config: DecodeConfig, prompts: list[list[int]]) -> dict:
    rounds: list[float] = []
    lock = threading.Lock()
    results: list[dict] = []
    refusals = {"busy": 0, "other": 0}
    cloud = TimedCloud(url, rounds, lock)

    def edge(index: int) -> None:
        for generation in range(generations):
            plain = prompts[(index * generations + generation) % len(prompts)]
            started = time.perf_counter()
            try:
                _tokens, finished = collect(generate_ids(pair, plain, plain, config, cloud=cloud))
            except CloudError as error:
                with lock:
                    refusals["busy" if error.code == "busy" else "other"] += 1
                continue
            with lock:
                results.append(
                    {
                        "edge": index,
                        "new_tokens": finished.stats.new_tokens,
                        "rounds": finished.stats.rounds,
                        "seconds": time.perf_counter() - started,
                    }
                )

    started = time.perf_counter()
    threads = [threading.Thread(target=edge, args=(i,)) for i in range(edges)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    cloud.close()
    tokens = sum(r["new_tokens"] for r in results)
    ordered = sorted(rounds)
    return {
        "edges": edges,
        "generations": len(results),
        "refused": refusals,
        "wall_s": round(wall, 3),
        "new_tokens": tokens,
        "tokens_per_s": round(tokens / wall, 3) if wall else 0.0,
        "rounds": len(rounds),
        "round_p50_s": round(statistics.median(ordered), 4) if ordered else None,
        "round_p95_s": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 4) if ordered else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="local,vllm")
    parser.add_argument("--edges", default="1,2,4")
    parser.add_argument("--generations", type=int, default=2, help="generations per Edge")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--draft-len", type=int, default=4)
    parser.add_argument("--vllm-threads", type=int, default=1)
    parser.add_argument("--out", default="results/cloud_load.json")
    args = parser.parse_args()

    torch.set_num_threads(1)
    pair = shared_test_pair(VLLM_PAIRING_ID)
    texts = [
        "Write about the weather and the sea.",
        "Describe a quiet morning in a small town by the river.",
        "Explain how a bicycle stays upright when it moves.",
        "Tell a short story about a lighthouse keeper and a storm.",
    ]
    prompts = [pair.tokenizer.encode(text * 3) for text in texts]
    config = DecodeConfig(
        method="specsteer", max_new_tokens=args.max_new_tokens, alpha=args.alpha, draft_len=args.draft_len
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    rows = []
    for engine in args.engines.split(","):
        extra = ["--engine", engine, "--max-sessions-per-client", "16", "--max-sessions", "16"]
        if engine == "vllm":
            extra += ["--vllm-threads", str(args.vllm_threads)]
        log_path = Path(args.out).with_suffix(f".{engine}.log")
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            started = time.perf_counter()
            child = start_cloud_process("--pairing", VLLM_PAIRING_ID, *extra, env=env, stderr=log, ready_timeout_s=900)
            startup = time.perf_counter() - started
            try:
                # One generation first so that neither Cloud's first-request costs land in the table.
                run_edges(child.url, pair, 1, 1, config, prompts)
                for edges in [int(n) for n in args.edges.split(",")]:
                    row = {
                        "engine": engine,
                        "startup_s": round(startup, 1),
                        **run_edges(child.url, pair, edges, args.generations, config, prompts),
                    }
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            finally:
                child.stop(timeout_s=120)
    machine = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in machine.splitlines() if "Model name" in line), "")
    document = {
        "command": " ".join(["python", *sys.argv]),
        "machine": {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version()},
        "pairing": VLLM_PAIRING_ID,
        "config": {
            "method": config.method,
            "max_new_tokens": config.max_new_tokens,
            "alpha": config.alpha,
            "draft_len": config.draft_len,
        },
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
