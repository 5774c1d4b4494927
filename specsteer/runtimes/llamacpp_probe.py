"""Proof that llama.cpp runs here, before anything relies on it: each configuration is exercised in a
child process, so that a native crash is caught and named instead of killing the caller.

A build of llama.cpp can pass every import and load check and still die on the first multi-token
``llama_decode`` on some CPUs: on Intel Xeons with AMX, weights repacked into llama.cpp's AMX buffer
type fault inside its matrix kernels (SIGSEGV; upstream llama.cpp issue #20824). set-up builds without
the AMX kernels, but a wheel from elsewhere may have them, and other CPUs may have other faults. So the
real decode path -- a multi-token prompt chunk, single steps, a (k+1)-token verification pass with
logits for every row, a rollback and a step after it -- runs on each offline model in a child process,
one configuration after another:

* ``repack``: llama.cpp's default, weights repacked into its CPU-specific buffer types (the fast path on
  AVX2 and AVX-512 machines);
* ``plain``: no extra buffer types (``use_extra_bufts = false``), weights used as stored.

The first configuration that passes is the one every model of this process uses; the outcome is cached
per CPU and build, so a later start reads it in a millisecond. When none passes, llama.cpp is reported
unavailable with the reason of each failure, and ``auto`` runs the transformers runtime.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from specsteer.runtimes.hardware import cpu_key, read_cpu
from specsteer.util.paths import cache_root

# How far a (k+1)-token pass's rows may be from the single steps that produced its tokens. llama.cpp's
# batched and single-token kernels differ by up to ~0.4 of a logit on the offline pair; a broken kernel
# gives garbage (or nothing finite), far beyond this.
AGREEMENT = 2.0
PROMPT_TOKENS = 48  # one multi-token chunk
DRAFT_TOKENS = 4  # k: the verification pass reads k + 1 tokens
CHILD_TIMEOUT_S = 240
ENV_FORCE = "SPECSTEER_LLAMA_CONFIG"  # a configuration's name: use it without a probe (tests, operators)


@dataclass(frozen=True)
class LlamaConfig:
    name: str
    extra_buffers: bool  # llama_model_params.use_extra_bufts
    summary: str


CONFIGURATIONS = (
    LlamaConfig("repack", True, "weights repacked for this CPU's vector units (llama.cpp's default)"),
    LlamaConfig("plain", False, "weights used as stored, no extra buffer types"),
)


def config_named(name: str) -> LlamaConfig:
    for config in CONFIGURATIONS:
        if config.name == name:
            return config
    raise ValueError(
        f"unknown llama.cpp configuration {name!r}; choose one of {', '.join(c.name for c in CONFIGURATIONS)}"
    )


@dataclass(frozen=True)
class ProbeOutcome:
    config: str
    passed: bool
    detail: str  # one line: what ran and how far the rows agreed, or how it failed
    seconds: float
    buffers: tuple[str, ...] = ()  # llama.cpp's buffer types that held the weights


@dataclass(frozen=True)
class ProbeReport:
    build: str  # the build key this report holds for
    cpu: str
    models: tuple[str, ...]  # the GGUF files exercised
    outcomes: tuple[ProbeOutcome, ...]

    @property
    def chosen(self) -> LlamaConfig | None:
        for outcome in self.outcomes:
            if outcome.passed:
                return config_named(outcome.config)
        return None

    def describe(self) -> str:
        lines = [
            f"{o.config}: {'passed' if o.passed else 'FAILED'} ({o.detail}; {o.seconds:.1f} s)" for o in self.outcomes
        ]
        chosen = self.chosen
        lines.append(
            f"using: {chosen.name} ({chosen.summary})"
            if chosen
            else "no configuration passed: llama.cpp is unavailable here; the transformers runtime runs instead"
        )
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ProbeReport:
        raw = json.loads(text)
        outcomes = tuple(ProbeOutcome(**{**o, "buffers": tuple(o.get("buffers", ()))}) for o in raw["outcomes"])
        return cls(raw["build"], raw["cpu"], tuple(raw["models"]), outcomes)


# --------------------------------------------------------------------------- the parent's side


def signal_name(code: int) -> str:
    """SIGSEGV for a child process's return code -11 (what killed it)."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def child_command(config: LlamaConfig, paths: Sequence[Path]) -> list[str]:
    return [sys.executable, "-m", "specsteer.runtimes.llamacpp_child", config.name, *map(str, paths)]


def run_config(config: LlamaConfig, paths: Sequence[Path], timeout: float = CHILD_TIMEOUT_S) -> ProbeOutcome:
    """One configuration, exercised on every model in a child process."""
    started = time.monotonic()
    command = child_command(config, paths)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env={**os.environ, ENV_FORCE: config.name}
        )
    except subprocess.TimeoutExpired:
        return ProbeOutcome(config.name, False, f"no answer within {timeout:.0f} s", time.monotonic() - started)
    seconds = time.monotonic() - started
    if done.returncode < 0:
        return ProbeOutcome(
            config.name,
            False,
            f"the child process crashed with {signal_name(done.returncode)} in llama.cpp's native code",
            seconds,
        )
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.strip().splitlines()) if line.strip()), "no message")
        return ProbeOutcome(config.name, False, f"failed: {last.strip()[:300]}", seconds)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return ProbeOutcome(
        config.name,
        True,
        f"{len(paths)} model(s): prompt chunk, single steps, a "
        f"{DRAFT_TOKENS + 1}-token pass, a rollback; rows within {result['worst']:.3f} of the steps",
        seconds,
        tuple(result["buffers"]),
    )


@lru_cache(maxsize=1)
def build_key() -> str:
    """This CPU and this installed build of llama-cpp-python: a proof holds for exactly that pair. Read
    once per process (every saved proof and calibration is looked up by it, per request)."""
    import importlib.util

    found = importlib.util.find_spec("llama_cpp")
    parts = [cpu_key()]
    if found is not None and found.submodule_search_locations:
        package = Path(next(iter(found.submodule_search_locations)))
        for file in sorted(package.rglob("*")):
            if file.suffix in (".so", ".dylib", ".dll", ".json") or file.name == "__init__.py":
                stat = file.stat()
                parts.append(f"{file.relative_to(package)}:{stat.st_size}:{int(stat.st_mtime)}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:20]


def report_path() -> Path:
    return cache_root() / "llamacpp-probe" / f"{build_key()}.json"


def run_probe(paths: Sequence[Path], say=print) -> ProbeReport:
    """Every configuration in order until one passes, on the GGUF files the caller names; the report is saved
    for this CPU and build."""
    outcomes = []
    for config in CONFIGURATIONS:
        say(f"checking llama.cpp configuration {config.name!r} ({config.summary}) in a child process…")
        outcome = run_config(config, paths)
        say(f"  {'passed' if outcome.passed else 'FAILED'}: {outcome.detail} ({outcome.seconds:.1f} s)")
        outcomes.append(outcome)
        if outcome.passed:
            break
    report = ProbeReport(build_key(), read_cpu()[0], tuple(str(p) for p in paths), tuple(outcomes))
    target = report_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_text(report.to_json())
    partial.replace(target)
    return report


def saved_report() -> ProbeReport | None:
    try:
        return ProbeReport.from_json(report_path().read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


_lock = threading.Lock()
_decided: tuple[LlamaConfig | None, str] | None = None


def proven_configuration(models: Collection[Path] = ()) -> tuple[LlamaConfig | None, str]:
    """(the configuration this process uses, a sentence saying why) -- None when none works here.
    Reads the saved proof; when there is none yet, runs the probe (about 10-20 s, child processes) on the GGUF
    files ``models`` the caller is about to use (the decision is kept for the process either way)."""
    global _decided
    with _lock:
        if _decided is None:
            _decided = _decide(models)
        return _decided


def forget() -> None:
    """Decide again at the next call (after a new probe, or in tests)."""
    global _decided
    with _lock:
        _decided = None


def _decide(models: Collection[Path]) -> tuple[LlamaConfig | None, str]:
    forced = os.environ.get(ENV_FORCE, "").strip()
    if forced:
        config = config_named(forced)
        return config, f"configuration {config.name!r} set by {ENV_FORCE}"
    report = saved_report()
    if report is None:
        paths = [path for path in models if path.exists()]
        if not paths:
            first = CONFIGURATIONS[0]
            return first, (
                f"configuration {first.name!r}, not yet proven here: the offline GGUF files are not "
                "prepared (scripts/setup.sh prepares them and runs the check)"
            )
        report = run_probe(paths, say=lambda line: print(f"[llama.cpp] {line}", file=sys.stderr, flush=True))
    chosen = report.chosen
    if chosen is None:
        failures = "; ".join(f"{o.config}: {o.detail}" for o in report.outcomes)
        return None, (
            f"llama.cpp failed its check on this machine ({failures}); see `python -m specsteer llamacpp check`"
        )
    buffers = next((o.buffers for o in report.outcomes if o.passed), ())
    where = f", buffers {'+'.join(buffers)}" if buffers else ""
    return chosen, f"configuration {chosen.name!r} ({chosen.summary}{where}), proven here by a child-process check"
