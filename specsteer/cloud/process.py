"""A Cloud service in a child process on a loopback port (benchmarks, tests, scripts).

:func:`start_cloud_process` runs ``python -m specsteer cloud`` and waits until it answers its health
check; the :class:`CloudProcess` it returns stops it gracefully (or kills it, to test a lost Cloud).
"""

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def free_loopback_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class CloudProcess:
    """``python -m specsteer cloud`` running as a child process on a loopback port (benchmarks, tests)."""

    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ask it to stop (SIGTERM to its pid), then kill it if it has not within ``timeout_s``."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """Stop it the hard way (SIGKILL to its pid): a Cloud that dies mid-generation."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def start_cloud_process(
    *arguments: str, port: int | None = None, env: dict | None = None, stderr=None, ready_timeout_s: float = 900.0
) -> CloudProcess:
    """Start a Cloud service on 127.0.0.1 (``arguments`` go to ``python -m specsteer cloud``) and wait
    until it answers; a child that exits or does not answer in time is stopped and reported."""
    import httpx

    port = port or free_loopback_port()
    command = [sys.executable, "-m", "specsteer", "cloud", "--host", "127.0.0.1", "--port", str(port), *arguments]
    process = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        cwd=Path(__file__).resolve().parents[2],
    )
    child = CloudProcess(process, port)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Cloud process exited with status {process.returncode} before it was ready")
        try:
            if httpx.get(f"{child.url}/v1/health", timeout=2.0).status_code == 200:
                return child
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    child.stop()
    raise RuntimeError(f"the Cloud process did not answer within {ready_timeout_s:g} s")
