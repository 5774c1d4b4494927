"""What machine a measurement was made on: a speed figure holds only for the machine it came from.

Recorded with every benchmark: the CPU model and the instruction-set flags that decide which
kernels run (AVX2, AVX-512, AVX512-BF16, AMX), the cores and threads used, and the versions of
the libraries that computed.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

# Flags that change which kernels torch and llama.cpp use on x86 CPUs.
RELEVANT_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx_vnni")


@dataclass(frozen=True)
class MachineInfo:
    cpu: str
    flags: tuple[str, ...]  # the relevant flags this CPU has
    cores: int  # cores this process may run on
    threads: int  # threads the runtimes were told to use
    fast_bf16: bool
    python: str
    versions: dict[str, str | None]  # torch, transformers, llama-cpp-python
    amx: bool = False  # Intel AMX tiles: llama.cpp's AMX buffer type is left out of set-up's build (see llamacpp_probe)
    llamacpp: str = ""  # the llama.cpp configuration proven here and the buffer types that held its weights

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        flags = " ".join(self.flags) or "none of " + " ".join(RELEVANT_FLAGS)
        llama = f"; llama.cpp: {self.llamacpp}" if self.llamacpp else ""
        return f"{self.cpu}; {self.cores} cores, {self.threads} threads; flags: {flags}{llama}"


def read_cpu(cpuinfo: str | None = None) -> tuple[str, frozenset[str]]:
    """The CPU model and every instruction-set flag it reports, from /proc/cpuinfo (Linux); elsewhere the
    platform's processor name and no flags. The one reader of /proc/cpuinfo in the project."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return platform.processor() or platform.machine(), frozenset()
    model, flags = "", frozenset[str]()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = frozenset(value.split())
    return model or platform.processor() or platform.machine(), flags


def cpu_model_and_flags(cpuinfo: str | None = None) -> tuple[str, tuple[str, ...]]:
    """The CPU model and the flags of RELEVANT_FLAGS it has."""
    model, flags = read_cpu(cpuinfo)
    return model, tuple(flag for flag in RELEVANT_FLAGS if flag in flags)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> MachineInfo:
    from specsteer.models.weights import default_dtype
    from specsteer.runtimes.base import cpu_threads

    cpu, flags = cpu_model_and_flags()
    import torch

    return MachineInfo(
        cpu=cpu,
        flags=flags,
        cores=cpu_threads(),
        threads=torch.get_num_threads(),
        fast_bf16=default_dtype() == "bf16",
        python=sys.version.split()[0],
        versions={name: _version(name) for name in ("torch", "transformers", "llama-cpp-python")},
        amx=any(flag.startswith("amx") for flag in flags),
        llamacpp=_llamacpp_summary(),
    )


def _llamacpp_summary() -> str:
    """ "repack (CPU+CPU_REPACK)": the configuration that passed this machine's check, from its saved proof."""
    if _version("llama-cpp-python") is None:
        return ""
    from specsteer.runtimes.llamacpp_probe import saved_report

    report = saved_report()
    if report is None:
        return "not checked here"
    passed = next((o for o in report.outcomes if o.passed), None)
    if passed is None:
        return "failed its check here: " + "; ".join(f"{o.config}: {o.detail}" for o in report.outcomes)
    return f"{passed.config} ({'+'.join(passed.buffers) or 'buffers unknown'})"
