"""Where the transformers runtime puts a pairing's models, and in what dtype: one value, the CPU by default.

:class:`Placement` is what a caller (the app's service, through its ``PairCatalog``) hands to
``specsteer.models.loading.load_pair`` as its ``device`` and ``dtype``. :meth:`Placement.detect` is the
app's choice on the machine it runs on: a CUDA GPU (a GPU Space, or ZeroGPU, whose ``spaces`` package
reports one) puts the models there in :func:`specsteer.runtimes.hardware.cuda_dtype` (bf16 from Ampere
on); anywhere else the CPU, in the CPU's own dtype policy, exactly as before. llama.cpp ignores it: the
project's llama.cpp is the CPU build. The exactness tests never use it: they build fp32 models on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specsteer.runtimes.base import dtype_label
from specsteer.runtimes.hardware import cuda_dtype, resolve_dtype


@dataclass(frozen=True)
class Placement:
    """``device``: "cpu", "cuda" or "cuda:N"; ``dtype``: "bf16" / "fp32" / "fp16", or None for the
    machine's default (hardware.default_dtype)."""

    device: str = "cpu"
    dtype: str | None = None

    def __post_init__(self) -> None:
        kind, _, index = self.device.partition(":")
        if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
            raise ValueError(f"unknown device {self.device!r}; use cpu, cuda or cuda:N")
        resolve_dtype(self.dtype)  # an unknown dtype name raises here, not at the first load

    @classmethod
    def detect(cls) -> Placement:
        """A CUDA GPU when torch reports one (in its dtype policy), else the CPU default."""
        if torch.cuda.is_available():
            return cls("cuda", cuda_dtype())
        return cls()

    @property
    def on_gpu(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def dtype_name(self) -> str:
        """ "bf16", "fp32", …: the dtype this placement loads transformers models in."""
        return dtype_label(resolve_dtype(self.dtype))

    def describe(self) -> str:
        """ "the GPU (cuda, bf16)" / "the CPU (fp32)"."""
        where = f"the GPU ({self.device}, " if self.on_gpu else "the CPU ("
        return f"{where}{self.dtype_name})"
