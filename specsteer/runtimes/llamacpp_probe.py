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
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

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


# --------------------------------------------------------------------------- what runs in the child


def exercise(path: Path, config: LlamaConfig) -> tuple[float, tuple[str, ...]]:
    """The decode path the engine takes, on one model: returns the largest disagreement between a
    verification pass's rows and the single steps that chose its tokens, and the buffer types used.
    Raises AssertionError when a row is not finite or disagrees beyond AGREEMENT."""
    from specsteer.runtimes.llamacpp import LlamaCppModel

    model = LlamaCppModel(path, name=path.stem, extra_buffers=config.extra_buffers)
    try:
        sequence = model.new_sequence(PROMPT_TOKENS + 2 * DRAFT_TOKENS + 4)
        prompt = np.random.default_rng(0).integers(100, min(model.output_rows, 20_000), PROMPT_TOKENS).tolist()
        logits = sequence.extend(prompt, 1)[0]  # a multi-token chunk: [V]
        steps, drafts = [], []
        for _ in range(DRAFT_TOKENS + 1):  # single steps, greedy: [V] each
            drafts.append(int(logits.argmax()))
            logits = sequence.extend([drafts[-1]], 1)[0]
            steps.append(logits)
        sequence.crop(PROMPT_TOKENS)  # rollback
        rows = sequence.extend(drafts, len(drafts))  # the (k+1)-token verification pass: [k+1, V]
        sequence.crop(PROMPT_TOKENS + 2)
        after_rollback = sequence.extend([drafts[2]], 1)[0]
        worst = 0.0
        for got, want in [*zip(rows, steps), (after_rollback, steps[2])]:
            assert bool(np.isfinite(got.numpy()).all()), "logits that are not finite"
            worst = max(worst, float((got - want).abs().max()))
        assert worst <= AGREEMENT, f"a verification row is {worst:.2f} from its single step (limit {AGREEMENT})"
        return worst, model.buffer_types
    finally:
        model.close()


def _child(config_name: str, paths: list[str]) -> int:
    config = config_named(config_name)
    worst, buffers = 0.0, set[str]()
    for path in paths:
        disagreement, used = exercise(Path(path), config)
        worst, buffers = max(worst, disagreement), buffers | set(used)
    print(json.dumps({"worst": worst, "buffers": sorted(buffers)}), flush=True)
    return 0


# --------------------------------------------------------------------------- the parent's side


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def child_command(config: LlamaConfig, paths: list[Path]) -> list[str]:
    return [sys.executable, "-m", "specsteer.runtimes.llamacpp_probe", "child", config.name, *map(str, paths)]


def run_config(config: LlamaConfig, paths: list[Path], timeout: float = CHILD_TIMEOUT_S) -> ProbeOutcome:
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
            f"the child process crashed with {_signal_name(done.returncode)} in llama.cpp's native code",
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

    from specsteer.runtimes.llamacpp import cpu_key

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
    from specsteer.models.weights import gguf_cache_dir

    return gguf_cache_dir().parent / "llamacpp-probe" / f"{build_key()}.json"


def probe_models() -> list[Path]:
    """The default pairing's GGUF files, when set-up has prepared them (never assembled here)."""
    from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS
    from specsteer.models.weights import prepared_gguf

    pairing = PAIRINGS[DEFAULT_PAIRING]
    paths = [prepared_gguf(spec) for spec in (pairing.specialist, pairing.generalist)]
    return [path for path in paths if path is not None]


def run_probe(paths: list[Path] | None = None, say=print) -> ProbeReport:
    """Every configuration in order until one passes; the report is saved for this CPU and build."""
    from specsteer.runtimes.llamacpp import _cpu

    paths = probe_models() if paths is None else paths
    outcomes = []
    for config in CONFIGURATIONS:
        say(f"checking llama.cpp configuration {config.name!r} ({config.summary}) in a child process…")
        outcome = run_config(config, paths)
        say(f"  {'passed' if outcome.passed else 'FAILED'}: {outcome.detail} ({outcome.seconds:.1f} s)")
        outcomes.append(outcome)
        if outcome.passed:
            break
    report = ProbeReport(build_key(), _cpu()[0], tuple(str(p) for p in paths), tuple(outcomes))
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


def proven_configuration() -> tuple[LlamaConfig | None, str]:
    """(the configuration this process uses, a sentence saying why) -- None when none works here.
    Reads the saved proof; runs the probe (about 10-20 s, child processes) when there is none yet."""
    global _decided
    with _lock:
        if _decided is None:
            _decided = _decide()
        return _decided


def forget() -> None:
    """Decide again at the next call (after a new probe, or in tests)."""
    global _decided
    with _lock:
        _decided = None


def _decide() -> tuple[LlamaConfig | None, str]:
    forced = os.environ.get(ENV_FORCE, "").strip()
    if forced:
        config = config_named(forced)
        return config, f"configuration {config.name!r} set by {ENV_FORCE}"
    report = saved_report()
    if report is None:
        paths = probe_models()
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
            f"llama.cpp failed its check on this machine ({failures}); see `python -m specsteer.runtimes.llamacpp check`"
        )
    buffers = next((o.buffers for o in report.outcomes if o.passed), ())
    where = f", buffers {'+'.join(buffers)}" if buffers else ""
    return chosen, f"configuration {chosen.name!r} ({chosen.summary}{where}), proven here by a child-process check"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "child":
        return _child(args[1], args[2:])
    print(
        "usage: python -m specsteer.runtimes.llamacpp_probe child CONFIG GGUF...  (use `python -m specsteer.runtimes.llamacpp check`)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
