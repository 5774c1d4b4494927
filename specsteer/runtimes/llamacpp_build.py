"""The llama.cpp build: whether the installed llama-cpp-python may run on this CPU (the stamp written beside
it), its bindings imported once, and whether a configuration of it passed the child-process check here
(``status``, ``configuration``; the check itself is ``llamacpp_probe``). The runtime is ``llamacpp``.
"""

from __future__ import annotations

import importlib.util
import json
import platform
from collections.abc import Collection
from functools import lru_cache
from pathlib import Path

from specsteer.runtimes.hardware import read_cpu
from specsteer.runtimes.llamacpp_probe import proven_configuration

# llama.cpp's own name for the package, pinned in requirements.txt and built by scripts/setup.sh.
PACKAGE = "llama-cpp-python"


class LlamaCppUnavailable(RuntimeError):
    """llama-cpp-python is missing or its build does not load; the message names the fallback."""


# What a build of llama.cpp assumes of the CPU it runs on. A native build (GGML_NATIVE=ON, what
# scripts/setup.sh makes) may use any instruction of the CPU it was compiled on; a portable one
# (GGML_NATIVE=OFF: the Docker image, a Space's `pip install`) assumes x86-64 with AVX2, FMA and F16C.
# Running a build on a CPU without those instructions kills the process (SIGILL) instead of raising,
# so the stamp written beside the installed package is checked before the library is loaded.
BUILD_STAMP = "specsteer-build.json"
PORTABLE_X86_FLAGS = ("avx", "avx2", "fma", "f16c")


def _stamp_path() -> Path | None:
    found = importlib.util.find_spec("llama_cpp")
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations))) / BUILD_STAMP


def write_build_stamp(native: bool) -> Path:
    """Record, beside the installed package, which CPU the build may run on."""
    path = _stamp_path()
    if path is None:
        raise SystemExit(f"{PACKAGE} is not installed")
    model, flags = read_cpu()
    required = (
        sorted(flags) if native else [flag for flag in PORTABLE_X86_FLAGS if platform.machine() in ("x86_64", "AMD64")]
    )
    path.write_text(
        json.dumps(
            {"native": native, "cpu": model, "machine": platform.machine(), "required_flags": required}, indent=1
        )
        + "\n"
    )
    return path


def build_problem() -> str | None:
    """Why the installed build must not run on this CPU, or None. A build without a stamp (installed
    by plain pip) is taken to be the portable one."""
    path = _stamp_path()
    model, flags = read_cpu()
    try:
        stamp = json.loads(path.read_text()) if path is not None and path.is_file() else None
    except (OSError, ValueError):
        stamp = None
    if stamp is None:
        machine = platform.machine()
        stamp = {
            "native": False,
            "cpu": "any",
            "machine": machine,
            "required_flags": list(PORTABLE_X86_FLAGS) if machine in ("x86_64", "AMD64") else [],
        }
    if stamp.get("machine") != platform.machine():
        return f"it was built for {stamp.get('machine')}, and this machine is {platform.machine()}"
    missing = sorted(set(stamp.get("required_flags", [])) - flags) if flags else []
    if missing:
        built_for = f"the CPU it was compiled on ({stamp.get('cpu')})" if stamp.get("native") else "x86-64 with AVX2"
        return (
            f"it was built for {built_for}, and this CPU ({model}) lacks {', '.join(missing[:6])}"
            f"{' …' if len(missing) > 6 else ''}"
        )
    return None


@lru_cache(maxsize=1)
def bindings():
    """The llama_cpp module, imported once; LlamaCppUnavailable says why it cannot be."""
    problem = build_problem() if importlib.util.find_spec("llama_cpp") is not None else None
    if problem:
        raise LlamaCppUnavailable(
            f"the llama.cpp runtime is unavailable: the installed {PACKAGE} must not run here ({problem}). "
            "Rebuild it on this machine with `bash scripts/setup.sh`, or use the transformers runtime "
            "(--runtime transformers)."
        )
    try:
        import llama_cpp
    except Exception as error:  # ImportError, or OSError from a broken shared library
        raise LlamaCppUnavailable(
            f"the llama.cpp runtime is unavailable: {PACKAGE} does not import here ({type(error).__name__}: "
            f"{error}). Build it with `bash scripts/setup.sh` (compiles llama.cpp once, about 10-15 minutes "
            "on 2 cores), or use the transformers runtime instead (--runtime transformers)."
        ) from error
    return llama_cpp


def status(models: Collection[Path] = ()) -> tuple[bool, str]:
    """(usable, a short reason) without raising: for `pairings`, the UI and `auto`. Usable means the
    build imports *and* a configuration of it passed the child-process check on this machine
    (:mod:`specsteer.runtimes.llamacpp_probe`; run once per CPU and build, then read from its saved report)."""
    try:
        module = bindings()
    except LlamaCppUnavailable as error:
        return False, str(error)
    config, why = proven_configuration(models)
    if config is None:
        return False, f"the llama.cpp runtime is unavailable: {why}"
    return True, f"{PACKAGE} {getattr(module, '__version__', '?')}, {why}"


def configuration(models: Collection[Path] = ()):
    """The configuration every model of this process loads with (LlamaCppUnavailable when none works); the
    check, when it has not run here yet, runs on ``models`` (the GGUF files about to be loaded)."""
    config, why = proven_configuration(models)
    if config is None:
        raise LlamaCppUnavailable(f"the llama.cpp runtime is unavailable: {why}")
    return config


def version() -> str | None:
    try:
        return getattr(bindings(), "__version__", None)
    except LlamaCppUnavailable:
        return None


def check(models: Collection[Path], saved_only: bool) -> int:
    """``specsteer llamacpp check``: prove the build here on the GGUF files ``models`` (or print the saved proof)."""
    from specsteer.runtimes import llamacpp_probe as probe

    try:
        module = bindings()
    except LlamaCppUnavailable as error:
        print(error)
        return 1
    print(f"{PACKAGE} {getattr(module, '__version__', '?')} imports; CPU: {read_cpu()[0]}")
    report = probe.saved_report() if saved_only else None
    if report is None:
        paths = [path for path in models if path.exists()]
        if not paths:
            print("the offline GGUF files are not prepared (scripts/setup.sh prepares them): nothing to check with")
            return 1
        report = probe.run_probe(paths)
    print(report.describe())
    return 0 if report.chosen is not None else 1
