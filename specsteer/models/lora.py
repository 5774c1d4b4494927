"""A LoRA adapter for a pairing's Specialist (paper Appendix A.2): what names it, the base it was trained on,
and the Specialist with it merged in.

An adapter directory holds the peft adapter (``adapter_config.json``, ``adapter_model.safetensors``) and
:data:`MANIFEST`, written by ``specsteer.edge.lora`` (``specsteer lora train``): the base model's name and
weight fingerprint, the task, the settings, the training time and loss curve, and the adapter weights'
sha256. :func:`read_lora` checks all of it; :func:`merged_specialist` returns a *copy* of the base Specialist
with the adapter merged into its weights (as fast as the base), so the pair's base model -- the Cloud's
generic copy -- stays untouched. The adapter is the Edge's: nothing of it is sent anywhere.

Only the transformers runtime serves an adapter (llama.cpp would need it converted to GGUF):
:data:`LORA_RUNTIME_MESSAGE` is the refusal.
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specsteer.models.weights import ModelLoadError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

MANIFEST = "specsteer_lora.json"
MANIFEST_VERSION = 1
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
LORA_RUNTIME_MESSAGE = "a LoRA Specialist runs on the transformers runtime; use --runtime transformers or auto"
LORA_RUNTIME_REASON = "a LoRA Specialist was given, and only the transformers runtime serves an adapter"
_MAX_MANIFEST_BYTES = 1_000_000
_FINGERPRINT_VALUES = 64  # leading values of each weight tensor that enter the fingerprint


class LoraError(ModelLoadError):
    """An adapter that cannot be used here; the message says why and what to do."""


@dataclass(frozen=True)
class SpecialistLora:
    """One trained adapter, read and checked (:func:`read_lora`). ``digest`` is the manifest's sha256,
    and the manifest holds the weights' sha256: the two together name exactly these weights."""

    path: Path
    digest: str
    base_model: str  # the Specialist it was trained on (its name in the registry, or the model's own)
    base_fingerprint: str  # base_fingerprint() of those weights
    task: str
    manifest: str  # the manifest's text, as written (its settings, timings and loss curve)

    @property
    def label(self) -> str:
        """What statistics and notes call it: the directory's name and the manifest's hash."""
        return f"{self.path.name}@{self.digest[:12]}"

    def details(self) -> dict[str, Any]:
        return dict(json.loads(self.manifest))


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def base_fingerprint(model: PreTrainedModel) -> str:
    """A short hash that tells base weights apart, whatever dtype they were loaded in: each tensor's name,
    shape, leading values and values sampled evenly across it, rounded to bf16 (an fp32 and a bf16 load of
    one checkpoint agree). A sample, not every weight: two checkpoints that differ in a few values only
    may share it."""
    digest = hashlib.sha256(type(model).__name__.encode())
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if "lora_" in name:
                continue
            digest.update(f"{name}:{tuple(tensor.shape)}".encode())
            flat = tensor.detach().reshape(-1)
            # Whole-number positions: a float linspace rounds past the end of a tensor of 100M+ values.
            spread = torch.arange(_FINGERPRINT_VALUES) * (flat.numel() - 1) // (_FINGERPRINT_VALUES - 1)
            sample = torch.cat([flat[:_FINGERPRINT_VALUES], flat[spread]]).to(torch.bfloat16).to(torch.float32)
            digest.update(sample.cpu().numpy().tobytes())
    return digest.hexdigest()[:32]


def read_lora(directory: str | Path) -> SpecialistLora:
    """The adapter in ``directory``, checked: its manifest is this project's, and its weights are those the
    manifest names. Raises LoraError saying what is wrong."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        raise LoraError(f"no LoRA adapter directory at {path} (train one: specsteer lora train ... --out {path})")
    manifest_path = path / MANIFEST
    missing = [name for name in (MANIFEST, ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not (path / name).is_file()]
    if missing:
        raise LoraError(
            f"{path} is not a SpecSteer LoRA adapter (missing {', '.join(missing)}); "
            "train one with `specsteer lora train`"
        )
    if manifest_path.stat().st_size > _MAX_MANIFEST_BYTES:
        raise LoraError(f"{manifest_path} is larger than {_MAX_MANIFEST_BYTES} bytes: not an adapter manifest")
    raw = manifest_path.read_bytes()
    try:
        manifest = json.loads(raw)
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
        if manifest.get("version") != MANIFEST_VERSION:
            raise ValueError(f"version {manifest.get('version')!r}, expected {MANIFEST_VERSION}")
        fields = {key: manifest[key] for key in ("base_model", "base_fingerprint", "task", "weights_sha256")}
        if not all(isinstance(value, str) and value for value in fields.values()):
            raise ValueError("a base or weights field is empty")
    except (ValueError, KeyError) as error:
        raise LoraError(f"{manifest_path}: not a readable adapter manifest ({error})") from error
    if file_sha256(path / ADAPTER_WEIGHTS) != fields["weights_sha256"]:
        raise LoraError(
            f"{path / ADAPTER_WEIGHTS} is not the file its manifest names (its sha256 differs): "
            "the adapter was changed or is incomplete; train it again"
        )
    return SpecialistLora(
        path=path.resolve(),
        digest=hashlib.sha256(raw).hexdigest(),
        base_model=fields["base_model"],
        base_fingerprint=fields["base_fingerprint"],
        task=fields["task"],
        manifest=raw.decode("utf-8"),
    )


def check_base(lora: SpecialistLora, model: PreTrainedModel, model_name: str) -> None:
    """Refuse an adapter trained on other weights than ``model`` (the pairing's Specialist)."""
    found = base_fingerprint(model)
    if found != lora.base_fingerprint:
        raise LoraError(
            f"the LoRA adapter {lora.label} was trained on the Specialist {lora.base_model!r} "
            f"(fingerprint {lora.base_fingerprint[:12]}), but this pairing's Specialist is {model_name!r} "
            f"(fingerprint {found[:12]}): choose the pairing it was trained on, or train an adapter on this "
            "one (specsteer lora train --pairing ...)"
        )


def merged_specialist(model: PreTrainedModel, lora: SpecialistLora) -> PreTrainedModel:
    """A copy of ``model`` with the adapter merged into its weights, in eval mode; ``model`` is unchanged
    (it stays the generic copy the Cloud runs)."""
    from peft import PeftModel

    base = copy.deepcopy(model)
    try:
        with warnings.catch_warnings():  # peft asks transformers a question it has renamed (a FutureWarning)
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
            adapted = PeftModel.from_pretrained(base, str(lora.path), is_trainable=False)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise LoraError(f"could not apply the LoRA adapter {lora.label}: {error}") from error
    merged = adapted.merge_and_unload()
    return merged.eval()
