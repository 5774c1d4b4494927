"""Facts about this machine that decide how models run here: the CPU and its instruction-set flags (the one
reader of /proc/cpuinfo), the threads to use, the CPU's key (which native builds may run here) and the dtype
policy (bf16 only where its matmuls are fast). A leaf: it imports no other module of the project."""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

import torch

# Flags that change which kernels torch and llama.cpp use on x86 CPUs.
RELEVANT_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx_vnni")


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


def cpu_threads() -> int:
    """Threads for compute: $SPECSTEER_THREADS, else the cores this process may run on."""
    configured = os.environ.get("SPECSTEER_THREADS", "").strip()
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            raise ValueError(f"SPECSTEER_THREADS must be a whole number, not {configured!r}") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def cpu_key() -> str:
    """Names this CPU model and instruction set: a native build is reusable exactly where it matches."""
    model, flags = read_cpu()
    return hashlib.sha256(f"{platform.machine()}|{model}|{' '.join(sorted(flags))}".encode()).hexdigest()[:16]


def default_dtype() -> str:
    """ "bf16" where bf16 matmuls are fast (a GPU of compute capability 8 or more, or a CPU with
    AVX512-BF16 / AMX), else "fp32"."""
    if torch.cuda.is_available():
        return cuda_dtype()
    return "bf16" if _cpu_has_fast_bf16() else "fp32"


def cuda_dtype() -> str:
    """The dtype the transformers runtime uses on this CUDA GPU: "bf16" from compute capability 8 (Ampere:
    A100, A10G, L4, H100, H200 and the ZeroGPU slices) on, where its tensor cores compute it natively; "fp32"
    on older cards (a T4), where bf16 is emulated and fp16 may overflow. Reads the capability only (no
    CUDA context is made, which ZeroGPU forbids outside a GPU task)."""
    major, _minor = torch.cuda.get_device_capability()
    return "bf16" if major >= 8 else "fp32"


def _cpu_has_fast_bf16() -> bool:
    _, flags = read_cpu()
    if not flags:  # not Linux: fall back to what torch's dispatcher detected
        capability = torch.backends.cpu.get_cpu_capability().upper()
        return "AVX512" in capability or "AMX" in capability
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


_DTYPE_NAMES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
}


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """ "bf16" / "fp32" / "fp16" (or the torch dtype itself); None or "auto" means default_dtype()."""
    if isinstance(dtype, torch.dtype):
        if dtype in _DTYPE_NAMES.values():
            return dtype
        raise ValueError(f"unsupported dtype {dtype}; use bf16 or fp32")
    name = (dtype or "auto").lower()
    if name == "auto":
        name = default_dtype()
    if name not in _DTYPE_NAMES:
        raise ValueError(f"unknown dtype {dtype!r}; use 'bf16' or 'fp32'")
    return _DTYPE_NAMES[name]
