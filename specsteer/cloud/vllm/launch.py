"""Starting vLLM servers as child processes, waiting until they answer, and stopping them; or finding them at URLs.

Launched engines run from ``.venv-vllm``, vLLM's own environment (``scripts/setup_vllm.sh`` makes it), each
on a free loopback port in its own process group. :func:`launch_cloud` and :func:`connect_cloud` give the
:class:`~specsteer.cloud.vllm.pair.VllmPair` a :class:`~specsteer.cloud.vllm.service.VllmCloudService` serves;
:func:`admission_budget` sizes the sessions' memory budget from the engines' KV caches.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specsteer.cloud.process import free_loopback_port
from specsteer.cloud.vllm.client import VllmEngine
from specsteer.cloud.vllm.pair import DEFAULT_MAX_CANDIDATES, VllmPair

REPO_ROOT = Path(__file__).resolve().parents[3]
VLLM_VENV = REPO_ROOT / ".venv-vllm"
VLLM_PYTHON = VLLM_VENV / "bin" / "python"


def vllm_available() -> str | None:
    """Why vLLM's own environment cannot run here (``scripts/setup_vllm.sh`` makes it), or None."""
    if not VLLM_PYTHON.exists():
        return f"{VLLM_VENV} is missing: run scripts/setup_vllm.sh"
    return None


@dataclass(frozen=True)
class EngineSettings:
    """How a launched vLLM server runs one model. ``kv_cache_bytes`` is its KV cache (the memory admission
    counts on); ``block_size`` the prefix cache's granularity: a request recomputes the tokens after the
    last full block it shares with an earlier one, so small blocks keep a round near k + 1 tokens."""

    dtype: str = "float32"
    max_model_len: int = 4096
    block_size: int = 32
    kv_cache_bytes: int = 256 * 2**20
    max_logprobs: int = DEFAULT_MAX_CANDIDATES
    enforce_eager: bool = True  # no torch.compile: start-up in seconds instead of a minute, slower steps
    threads: int | None = None  # OpenMP threads of the engine (None: vLLM's choice)
    extra: tuple[str, ...] = ()


@dataclass
class EngineProcess:
    """A vLLM server this process started: its process (a new process group, stopped by its id), URL and log."""

    role: str
    process: subprocess.Popen
    url: str
    log_path: Path

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to its process group (the server and the engine core it spawned), then SIGKILL."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def engine_command(model: str | Path, name: str, port: int, settings: EngineSettings) -> list[str]:
    command = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        settings.dtype,
        "--max-model-len",
        str(settings.max_model_len),
        "--enable-prefix-caching",
        "--block-size",
        str(settings.block_size),
        "--logprobs-mode",
        "raw_logprobs",
        "--max-logprobs",
        str(settings.max_logprobs),
        "--enable-prompt-tokens-details",
        "--kv-cache-memory-bytes",
        str(settings.kv_cache_bytes),
        "--generation-config",
        "vllm",  # the request's own sampling settings, not the model directory's defaults
    ]
    if settings.enforce_eager:
        command.append("--enforce-eager")
    return command + list(settings.extra)


def launch_engine(
    role: str, model: str | Path, settings: EngineSettings, log_dir: Path, port: int | None = None
) -> EngineProcess:
    """Start a vLLM OpenAI-compatible server for ``model`` on a free loopback port (not yet ready)."""
    problem = vllm_available()
    if problem:
        raise RuntimeError(problem)
    port = port or free_loopback_port()
    name = role.replace(" ", "-")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"vllm-{name}-{port}.log"
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("VIRTUAL_ENV", None)
    if settings.threads:
        env["OMP_NUM_THREADS"] = str(settings.threads)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            engine_command(model, name, port, settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: stop() ends the engine core it spawns too
            preexec_fn=_end_with_parent,
        )
    return EngineProcess(role, process, f"http://127.0.0.1:{port}", log_path)


def _end_with_parent() -> None:
    """In the engine's child, before it runs vLLM: Linux sends it SIGTERM when the thread that started it
    ends, so a Cloud that is killed leaves no engine behind (launch from a thread that lives as long)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_ready(
    engines: Sequence[EngineProcess], timeout_s: float = 600.0, progress: Callable[[str], None] | None = None
) -> None:
    """Wait until every engine answers /health; raises RuntimeError (with its log's tail) when one exits
    or the time runs out. ``progress`` hears a line every ~15 s."""
    import httpx

    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    waiting = list(engines)
    last_said = started
    while waiting:
        for engine in list(waiting):
            code = engine.process.poll()
            if code is not None:
                raise RuntimeError(
                    f"the vLLM engine for the {engine.role} exited with code {code} while starting; "
                    f"its log ({engine.log_path}) ends:\n{engine.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(engine.url + "/health", timeout=2.0).status_code == 200:
                    waiting.remove(engine)
        if not waiting:
            break
        now = time.monotonic()
        if now > deadline:
            names = ", ".join(e.role for e in waiting)
            raise RuntimeError(f"the vLLM engine(s) for the {names} did not start within {timeout_s:g} s")
        if progress and now - last_said >= 15:
            last_said = now
            progress(f"waiting for vLLM ({', '.join(e.role for e in waiting)}): {now - started:.0f} s")
        time.sleep(0.5)


def kv_bytes_per_token(model_dir: str | Path, dtype: str) -> int:
    """One token's keys and values in a model served at ``dtype``, from its config.json."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    config = config.get("text_config", config)
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    itemsize = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}.get(dtype, 2)
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * itemsize


@dataclass
class LaunchedCloud:
    """The engines a vLLM Cloud started, and the pair over them; ``stop`` ends both servers."""

    pair: VllmPair
    processes: list[EngineProcess]

    def stop(self) -> None:
        self.pair.close()
        for process in self.processes:
            process.stop()


def launch_cloud(
    pairing_id: str,
    vocab_size: int,
    generalist_dir: Path,
    specialist_dir: Path,
    settings: EngineSettings,
    log_dir: Path,
    timeout_s: float = 600.0,
    progress: Callable[[str], None] | None = None,
) -> LaunchedCloud:
    """Start both engines, wait for them, and return the pair a :class:`~specsteer.cloud.vllm.service.VllmCloudService` serves."""
    processes = [
        launch_engine("generalist", generalist_dir, settings, log_dir),
        launch_engine("generic specialist", specialist_dir, settings, log_dir),
    ]
    try:
        wait_ready(processes, timeout_s, progress)
        per_token = kv_bytes_per_token(generalist_dir, settings.dtype) + kv_bytes_per_token(
            specialist_dir, settings.dtype
        )
        pair = VllmPair(
            pairing_id,
            vocab_size,
            VllmEngine("generalist", processes[0].url),
            VllmEngine("generic specialist", processes[1].url),
            kv_bytes_per_token=per_token,
            max_candidates=settings.max_logprobs,
            max_model_len=settings.max_model_len,
        )
    except BaseException:
        for process in processes:
            process.stop()
        raise
    return LaunchedCloud(pair, processes)


def connect_cloud(
    pairing_id: str, vocab_size: int, generalist_url: str, specialist_url: str, max_candidates: int
) -> VllmPair:
    """The pair over two vLLM servers already running at these URLs (started with the options of
    :func:`engine_command`: raw log-probabilities, prefix caching, ``--max-logprobs``, prompt token details)."""
    generalist = VllmEngine("generalist", generalist_url)
    specialist = VllmEngine("generic specialist", specialist_url)
    lengths = [n for n in (generalist.max_model_len(), specialist.max_model_len()) if n is not None]
    return VllmPair(
        pairing_id,
        vocab_size,
        generalist,
        specialist,
        max_candidates=max_candidates,
        max_model_len=min(lengths) if lengths else None,
    )


def admission_budget(generalist_dir: Path, specialist_dir: Path, settings: EngineSettings) -> int:
    """The sessions' budget, in the bytes :meth:`~specsteer.cloud.vllm.service.VllmCloudService.session_bytes` reserves, for two launched
    engines of ``settings.kv_cache_bytes`` each: the tokens the fuller engine can hold, times both engines'
    bytes per token, less a tenth for the partial blocks a round's k + 1 requests hold side by side."""
    per_engine = [kv_bytes_per_token(d, settings.dtype) for d in (generalist_dir, specialist_dir)]
    tokens = settings.kv_cache_bytes // max(per_engine)
    return max(1, int(tokens * sum(per_engine) * 0.9))
