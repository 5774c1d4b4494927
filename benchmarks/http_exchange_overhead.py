"""What one HTTP exchange with the Cloud service costs beyond the Cloud's own work, on loopback.

Times ``Link.verify`` with an empty draft (one tiny-model pass) in process and through
``python -m specsteer cloud`` (a child process, tiny test models), and a bare TCP echo round trip
between two threads: the floor any TCP transport pays, WebSocket included. The HTTP cost minus that
floor is the most a WebSocket transport could save per round. Prints JSON.

    python benchmarks/http_exchange_overhead.py [--rounds 300]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsteer.cloud.client import RemoteCloud  # noqa: E402
from specsteer.cloud.in_process import InProcessCloud  # noqa: E402
from specsteer.cloud.process import start_cloud_process  # noqa: E402
from specsteer.models.tiny import shared_tiny_pair  # noqa: E402
from specsteer.protocol.link import Link  # noqa: E402
from specsteer.protocol.wire import Draft, Open  # noqa: E402
from specsteer.runtimes.machine import machine_info  # noqa: E402


def exchange_ms(endpoint, rounds: int) -> list[float]:
    link = Link(endpoint.transport())
    link.open(Open(link.session, "match", [1, 2, 3, 4], 4096))
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        link.verify(Draft(link.session, []))
        times.append(1000 * (time.perf_counter() - started))
    link.close()
    return times


def tcp_echo_ms(rounds: int, size: int = 64) -> list[float]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def echo():
        connection, _ = server.accept()
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        client.sendall(b"x" * size)
        received = 0
        while received < size:
            received += len(client.recv(65536))
        times.append(1000 * (time.perf_counter() - started))
    client.close()
    server.close()
    return times


def summary(times: list[float]) -> dict:
    return {
        "median_ms": statistics.median(times),
        "mean_ms": statistics.fmean(times),
        "p90_ms": sorted(times)[int(0.9 * len(times))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as the child Cloud (OMP_NUM_THREADS=1): both sides do the same work
    pair = shared_tiny_pair()
    child = start_cloud_process("--pairing", "tiny-test", env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        with RemoteCloud(child.url) as remote:
            exchange_ms(remote, 20)  # warm-up
            http = exchange_ms(remote, args.rounds)
    finally:
        child.stop()
    local = exchange_ms(InProcessCloud(pair), args.rounds)
    tcp = tcp_echo_ms(args.rounds)
    result = {
        "in_process": summary(local),
        "http": summary(http),
        "tcp_echo": summary(tcp),
        "http_overhead_ms": statistics.median(http) - statistics.median(local),
        "most_a_websocket_could_save_ms": statistics.median(http) - statistics.median(local) - statistics.median(tcp),
        "rounds": args.rounds,
        "machine": machine_info().to_dict(),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
