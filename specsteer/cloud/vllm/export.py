"""The model directories launched vLLM engines serve: written from a loaded pair, or found for a listed pairing."""

from __future__ import annotations

from pathlib import Path


def save_pair(pair, directory: Path) -> tuple[Path, Path]:
    """Write a transformers pair's Generalist and Specialist (config, safetensors, tokenizer) where vLLM can
    load them: ``directory/generalist`` and ``directory/specialist``."""
    written = []
    for role, runtime in (("generalist", pair.generalist), ("specialist", pair.specialist)):
        target = directory / role
        model = getattr(runtime, "model", None)
        if model is None or not hasattr(model, "save_pretrained"):
            raise ValueError(f"the {role} of {pair.pairing_id} is not a transformers model; give its directory")
        model.save_pretrained(target, safe_serialization=True)
        pair.tokenizer.save_pretrained(target)
        written.append(target)
    return written[0], written[1]


def pairing_model_dirs(pairing_id: str) -> tuple[Path, Path] | str:
    """The transformers directories launched engines serve for a listed pairing (Generalist, Specialist):
    an offline model's converted cache (``specsteer models prepare --runtime transformers`` makes it), a
    local model's own directory. A message saying why not where a model has none."""
    from specsteer.models.registry import UnknownPairingError, converted_cache_ready, converted_model_dir, get_pairing

    try:
        pairing = get_pairing(pairing_id)
    except UnknownPairingError as error:
        return str(error)
    dirs = []
    for role, spec in (("Generalist", pairing.generalist), ("Specialist", pairing.specialist)):
        if spec.kind == "offline" and converted_cache_ready(spec):
            dirs.append(converted_model_dir(spec))
        elif spec.kind == "local" and (Path(spec.ref) / "config.json").is_file():
            dirs.append(Path(spec.ref))
        elif spec.kind == "offline":
            return (
                f"the {role} of {pairing_id} ({spec.name}) has no converted weights yet: run "
                f"`specsteer models prepare --pairing {pairing_id} --runtime transformers`, or give "
                "--vllm-generalist-model and --vllm-specialist-model"
            )
        else:
            return (
                f"the {role} of {pairing_id} is a {spec.kind} model: give --vllm-generalist-model and "
                "--vllm-specialist-model (model directories vLLM loads)"
            )
    return dirs[0], dirs[1]
