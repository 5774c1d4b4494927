"""The models' files: where each model's weights come from, verified, assembled, converted and loaded.

A pairing's two models are loaded together by ``specsteer.models.loading`` (``load_pair``), through this module.

Two runtimes run the models (specsteer.runtimes.base): llama.cpp reads GGUF files directly, with their
quantized kernels; transformers runs anything else, and the GGUF models after a one-time conversion.

Weights come from four kinds of source (see registry.ModelSpec):

* offline: a GGUF split across registry packages. The chunks are concatenated once, in order, into
  ``$SPECSTEER_CACHE/gguf/`` (default ``~/.cache/specsteer``) while being hashed, and the SHA-256 is
  checked. llama.cpp reads that file. Only when the transformers runtime is asked for is it
  dequantized with transformers' GGUF loader and saved with ``save_pretrained`` into
  ``$SPECSTEER_CACHE/models/<name>``, so later loads take seconds instead of about a minute. The
  tokenizer is read from the GGUF once and cached for both runtimes.
* hub: a model-hub id (transformers only). Tried from the local Hugging Face cache first; the network is
  used only when a one-second reachability probe passes, so an offline machine fails fast with a useful
  message.
* local: a ``save_pretrained`` directory (transformers only). gguf: a .gguf file (llama.cpp reads it as
  it is; transformers dequantizes it at every load).

Run ``python -m specsteer models prepare [--runtime ...]`` to do the one-time work ahead of time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specsteer.models.registry import (
    CACHE_MARKER,
    DEFAULT_PAIRING,
    INSTALL_HINT,
    ModelSpec,
    assembled_gguf,
    converted_cache_ready,
    converted_model_dir,
    gguf_stamp,
    hub_disabled_by_env,
    hub_reachable,
    import_name,
    install_hint,
    package_problems,
)
from specsteer.runtimes import llamacpp
from specsteer.runtimes.base import ModelRuntime
from specsteer.runtimes.hardware import default_device, resolve_dtype
from specsteer.runtimes.llamacpp_build import LlamaCppUnavailable
from specsteer.util.paths import cache_root

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Progress = Callable[[str], None]

# Dequantized Q4_K/Q6_K weights need ~21 significant bits, so they are exact in fp32 only. The cache
# stores fp16 instead: half the disk (4.8 GB instead of 9.6 GB for the default pair), every weight within
# 2**-11 relative of the exact value (measured on the 0.5B model: last-position logits move by at most
# 0.0055, greedy output unchanged) — far below the 4-bit quantization error itself. Upcasting fp16 to
# fp32 is lossless, so fp32 runs compute exactly on the stored weights and the fp32 exactness tests of
# the decoding core stay meaningful. A model whose weights overflow fp16 is stored in fp32 instead.
CACHE_DTYPE = torch.float16
_FP16_MAX = torch.finfo(torch.float16).max

_COPY_BLOCK = 1 << 22
# One assembly or conversion at a time (each reads or writes a GB); re-entrant because a
# conversion first makes sure its GGUF is assembled.
_conversion_lock = threading.RLock()
_STALE_WORK_DIR_S = 6 * 3600


class ModelLoadError(RuntimeError):
    """A model or pairing cannot be loaded; the message says why and what to do."""


def quiet(_: str) -> None:
    """The default progress callback."""


# --------------------------------------------------------------------------- dtype and device


# --------------------------------------------------------------------------- offline: chunk packages


def chunk_files(spec: ModelSpec) -> list[Path]:
    """The installed files that make up an offline model's GGUF, in concatenation order."""
    problems = package_problems(spec)
    if problems:
        listed = "; ".join(f"{name}: {problem}" for name, problem in problems.items())
        raise ModelLoadError(
            f"{spec.name} cannot be assembled: {listed}. Install exactly the pinned packages with\n"
            f"  {spec.pip_command(list(problems))}\n({_pinned_by(spec)})"
        )
    files: list[Path] = []
    for distribution in spec.packages:
        files.extend(_files_in_package(spec, distribution))
    return files


def _files_in_package(spec: ModelSpec, distribution: str) -> list[Path]:
    root = _package_dir(distribution)
    if spec.package_count == 0:
        found = [root / spec.gguf_file] if (root / spec.gguf_file).is_file() else []
    else:
        data = root / "data"
        # Names sort in chunk order within a package (part01.bin, ….gguf.part00, …).
        found = sorted(path for path in data.iterdir() if path.is_file()) if data.is_dir() else []
    if not found:
        raise ModelLoadError(
            f"package {distribution} is installed but holds no model data under {root}; reinstall it with\n"
            f"  {spec.pip_command([distribution]).replace('--no-deps', '--no-deps --force-reinstall')}"
        )
    return found


def _pinned_by(spec: ModelSpec) -> str:
    """Where the project pins ``spec``'s packages, for an install message."""
    hint = install_hint(spec)
    return f"pinned with its pairing's other weights: {hint}" if hint else f"for the default pairing: {INSTALL_HINT}"


def _package_dir(distribution: str) -> Path:
    import importlib.util

    # find_spec locates the package without executing its __init__ (some import heavy dependencies).
    found = importlib.util.find_spec(import_name(distribution))
    if found is None or not found.submodule_search_locations:
        raise ModelLoadError(f"package {distribution} is not importable; reinstall it")
    return Path(next(iter(found.submodule_search_locations)))


def _copy_and_hash(sources: Iterable[Path], destination: Path | None) -> str:
    """SHA-256 of the concatenated ``sources``, written to ``destination`` on the way when given."""
    digest = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(destination, "wb")) if destination else None
        for source in sources:
            with open(source, "rb") as chunk:
                while block := chunk.read(_COPY_BLOCK):
                    digest.update(block)
                    if sink:
                        sink.write(block)
    return digest.hexdigest()


def offline_gguf(spec: ModelSpec, progress: Progress | None = None) -> Path:
    """The GGUF file of an offline model, its SHA-256 checked once.

    A model split across packages is assembled once into ``$SPECSTEER_CACHE/gguf/``; a single-file
    package is used where it is installed. A verification stamp beside it (hash, size, mtime)
    spares later loads the read of the whole file. On a mismatch the assembled file is deleted and
    ModelLoadError names expected and actual hashes.
    """
    report = progress or quiet
    if spec.package_count > 0 and package_problems(spec) and assembled_gguf(spec).is_file():
        return _assembled_without_packages(spec, report)
    files = chunk_files(spec)
    target = files[0] if spec.package_count == 0 else assembled_gguf(spec)
    stamp = gguf_stamp(spec)
    with _conversion_lock:
        if _stamp_matches(stamp, target, spec.sha256):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        if spec.package_count == 0:
            report(f"verifying sha256 of {target.name}…")
            actual = _copy_and_hash(files, None)
        else:
            report(f"assembling {spec.name} from {len(spec.packages)} packages and verifying sha256…")
            partial = target.with_name(target.name + ".partial")
            actual = _copy_and_hash(files, partial)
            if actual == spec.sha256:
                partial.replace(target)  # atomic: a crash never leaves a half file under the final name
            else:
                partial.unlink(missing_ok=True)  # only the assembled copy; never an installed package's file
        if actual != spec.sha256:
            raise ModelLoadError(
                f"SHA-256 mismatch for {spec.name}: expected {spec.sha256}, got {actual}. The installed packages "
                f"are corrupt or not the pinned versions; nothing was cached. Reinstall them with\n"
                f"  {spec.pip_command().replace('--no-deps', '--no-deps --force-reinstall')}"
            )
        _write_stamp(stamp, target, actual)
    return target


def prepared_gguf(spec: ModelSpec) -> Path | None:
    """An offline model's GGUF file if set-up has already verified it, else None (nothing is assembled)."""
    stamp = gguf_stamp(spec)
    try:
        target = Path(json.loads(stamp.read_text())["path"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return target if spec.kind == "offline" and _stamp_matches(stamp, target, spec.sha256) else None


def prepared_ggufs(specs: Iterable[ModelSpec]) -> list[Path]:
    """The GGUF files of ``specs`` that set-up has already verified (nothing is assembled): what the llama.cpp
    check runs on when it has not run on this machine yet."""
    return [path for path in map(prepared_gguf, specs) if path is not None]


def gguf_cache_dir() -> Path:
    return cache_root() / "gguf"


def _assembled_without_packages(spec: ModelSpec, report: Progress) -> Path:
    """The assembled GGUF of a model whose chunk packages are gone (the container image deletes them
    once the file is verified, to keep one copy of the weights). Its stamp vouches for it; where the
    stamp no longer matches (a copied file's modification time differs), the file's own SHA-256 does."""
    target, stamp = assembled_gguf(spec), gguf_stamp(spec)
    with _conversion_lock:
        if _stamp_matches(stamp, target, spec.sha256):
            return target
        report(f"verifying sha256 of {target.name} (its packages are not installed)…")
        actual = _copy_and_hash([target], None)
        if actual != spec.sha256:
            raise ModelLoadError(
                f"SHA-256 mismatch for {spec.name}'s assembled file {target}: expected {spec.sha256}, got "
                f"{actual}, and its packages are not installed to assemble it again. Delete that file and "
                f"install them with\n  {spec.pip_command()}\n({_pinned_by(spec)})"
            )
        try:
            _write_stamp(stamp, target, actual)
        except OSError as error:  # a read-only cache still serves; the next load hashes the file again
            report(f"could not record the verification in {stamp}: {error}")
    return target


def _write_stamp(stamp: Path, target: Path, sha256: str) -> None:
    info = target.stat()
    stamp.write_text(
        json.dumps({"sha256": sha256, "path": str(target), "size": info.st_size, "mtime_ns": info.st_mtime_ns}) + "\n"
    )


def _stamp_matches(stamp: Path, target: Path, sha256: str) -> bool:
    try:
        recorded = json.loads(stamp.read_text())
        info = target.stat()
    except (OSError, ValueError):
        return False
    return (
        recorded.get("sha256") == sha256
        and recorded.get("path") == str(target)
        and recorded.get("size") == info.st_size
        and recorded.get("mtime_ns") == info.st_mtime_ns
    )


# --------------------------------------------------------------------------- offline: conversion cache


def prepare_offline(spec: ModelSpec, progress: Progress | None = None) -> Path:
    """The converted ``save_pretrained`` directory of an offline model, converting it once if needed."""
    if spec.kind != "offline":
        raise ValueError(f"{spec.name} is not an offline model")
    target = converted_model_dir(spec)
    with _conversion_lock:
        if not converted_cache_ready(spec):
            _convert(spec, target, progress or quiet)
    return target


def _convert(spec: ModelSpec, target: Path, progress: Progress) -> None:
    """Assemble, verify, dequantize and save into ``target``, atomically: a crash leaves no half cache."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_work_dirs(target)
    gguf_path = offline_gguf(spec, progress)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        progress(f"converting {spec.name} for the transformers runtime (one-time, about a minute)…")
        model, tokenizer = _read_gguf(gguf_path)
        progress(f"saving the converted {spec.name}…")
        converted = work / "converted"
        _save_converted(model, tokenizer, converted, spec)
        del model
        _publish(converted, target, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    progress(f"cached {spec.name} at {target}")


def _remove_stale_work_dirs(target: Path) -> None:
    """Drop work directories that a killed conversion left behind (old enough not to be in use)."""
    for leftover in target.parent.glob(f".{target.name}.*"):
        if time.time() - leftover.stat().st_mtime > _STALE_WORK_DIR_S:
            shutil.rmtree(leftover, ignore_errors=True)


def _read_gguf(path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Dequantize a GGUF into an ordinary fp32 model (the only dtype in which the values are exact)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    try:
        # dequantize=True: a plain dense model, and no attempt to fetch packed-GGUF matmul kernels
        # (transformers 5.x would otherwise look for the `kernels` package and the hub).
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
        )
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        raise ModelLoadError(f"transformers could not read the GGUF {path}: {error}") from error
    _drop_gguf_quantization(model)
    return model, tokenizer


def _drop_gguf_quantization(model: PreTrainedModel) -> None:
    """Make a GGUF-loaded model an ordinary one, so save_pretrained and .to(dtype) accept it.

    The weights are dense already; what is left is the loader's bookkeeping, which would make
    save_pretrained refuse ("not serializable") or write a quantization_config that later loads obey.
    """
    # transformers declares neither attribute: torch's Module.__setattr__ stub types them Tensor | Module.
    model.hf_quantizer = None  # type: ignore[assignment]
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.is_quantized = False  # type: ignore[assignment]


def _save_converted(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path, spec: ModelSpec
) -> None:
    storage = CACHE_DTYPE if _fits_fp16(model) else torch.float32
    model.to(storage)  # type: ignore[arg-type]  # transformers' decorator on .to hides its dtype signature
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    marker = {"sha256": spec.sha256, "source": spec.ref, "storage_dtype": str(storage).removeprefix("torch.")}
    # The marker is written last, inside the not-yet-published directory: its presence means complete.
    (directory / CACHE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")


@torch.no_grad()
def _fits_fp16(model: PreTrainedModel) -> bool:
    return all(bool(torch.isfinite(p).all()) and float(p.abs().max()) <= _FP16_MAX for p in model.parameters())


def _publish(converted: Path, target: Path, work: Path) -> None:
    """Move ``converted`` to ``target`` with renames only; an older conversion is moved aside first."""
    if target.exists():
        target.rename(work / "previous")
    try:
        converted.rename(target)
    except OSError:
        # Another process published the same conversion first; keep theirs.
        if not (target / CACHE_MARKER).is_file():
            raise


# --------------------------------------------------------------------------- reading any source


def load_tokenizer(spec: ModelSpec, progress: Progress | None = None) -> PreTrainedTokenizerBase:
    """The model's tokenizer. An offline model's comes from its GGUF, read once and cached (a few MB),
    so neither runtime needs the transformers conversion of the weights to tokenize."""
    from transformers import AutoTokenizer

    if spec.kind != "offline":
        return _read(spec, AutoTokenizer.from_pretrained, {}, progress or quiet)
    directory = cache_root() / "tokenizers" / spec.name
    marker = directory / CACHE_MARKER
    with _conversion_lock:
        if not _marker_matches(marker, spec.sha256):
            gguf_path = offline_gguf(spec, progress)
            (progress or quiet)(f"reading the tokenizer of {spec.name}…")
            try:
                tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
            except (OSError, ValueError, KeyError) as error:
                raise ModelLoadError(
                    f"could not read the tokenizer of {spec.name} from {gguf_path}: {error}"
                ) from error
            work = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=_ensure_dir(directory.parent)))
            tokenizer.save_pretrained(work)
            (work / CACHE_MARKER).write_text(json.dumps({"sha256": spec.sha256}) + "\n")
            shutil.rmtree(directory, ignore_errors=True)
            work.rename(directory)
    return AutoTokenizer.from_pretrained(str(directory))


def _ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _marker_matches(marker: Path, sha256: str) -> bool:
    try:
        return json.loads(marker.read_text()).get("sha256") == sha256
    except (OSError, ValueError):
        return False


def gguf_path(spec: ModelSpec, progress: Progress | None = None) -> Path:
    """The GGUF file the llama.cpp runtime reads for ``spec``; ModelLoadError for a model that has none."""
    if spec.kind == "offline":
        return offline_gguf(spec, progress)
    if spec.kind == "gguf":
        path = Path(spec.ref)
        if not path.is_file():
            raise ModelLoadError(f"no such GGUF file: {spec.ref}")
        return path
    raise ModelLoadError(
        f"the llama.cpp runtime reads GGUF files, and {spec.name} is a {spec.kind} model "
        f"({spec.ref}); use the transformers runtime for it (--runtime transformers)."
    )


def load_llamacpp(spec: ModelSpec, progress: Progress | None = None) -> ModelRuntime:
    path = gguf_path(spec, progress)
    (progress or quiet)(f"loading {spec.name} (llama.cpp)…")
    try:
        return llamacpp.LlamaCppModel(path, name=spec.name)
    except LlamaCppUnavailable as error:
        raise ModelLoadError(str(error)) from error
    except (ValueError, MemoryError) as error:
        raise ModelLoadError(f"could not load {spec.name} with llama.cpp: {error}") from error


def load_model(
    spec: ModelSpec,
    dtype: str | torch.dtype | None = None,
    progress: Progress | None = None,
    device: str | torch.device | None = None,
) -> PreTrainedModel:
    """One model in eval mode, in ``dtype``, on ``device`` (default: CUDA when available)."""
    from transformers import AutoModelForCausalLM, GgufConfig

    torch_dtype, target = resolve_dtype(dtype), torch.device(device) if device is not None else default_device()
    report = progress or quiet
    report(f"loading {spec.name} ({str(torch_dtype).removeprefix('torch.')})…")
    if spec.kind == "gguf":
        kwargs: dict[str, Any] = {"dtype": torch.float32, "quantization_config": GgufConfig(dequantize=True)}
        model = _read(spec, AutoModelForCausalLM.from_pretrained, kwargs, report)
        _drop_gguf_quantization(model)
        model.to(torch_dtype)
    else:
        kwargs = {"dtype": torch_dtype}
        if target.type != "cpu":
            kwargs["device_map"] = str(target)  # straight onto the accelerator, not through host memory
        model = _read(spec, AutoModelForCausalLM.from_pretrained, kwargs, report)
    return model.to(target).eval()


def _read(spec: ModelSpec, from_pretrained: Callable[..., Any], kwargs: dict[str, Any], progress: Progress) -> Any:
    """Call a ``from_pretrained`` on wherever ``spec`` lives, turning failures into ModelLoadError."""
    if spec.kind == "hub":
        return _read_from_hub(spec, from_pretrained, kwargs, progress)
    if spec.kind == "offline":
        location, extra = str(prepare_offline(spec, progress)), {}
    elif spec.kind == "gguf":
        location, extra = str(Path(spec.ref).parent), {"gguf_file": Path(spec.ref).name}
    else:
        location, extra = spec.ref, {}
    try:
        return from_pretrained(location, **extra, **kwargs)
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"could not load {spec.name} from {spec.ref}: {error}") from error


def _read_from_hub(
    spec: ModelSpec, from_pretrained: Callable[..., Any], kwargs: dict[str, Any], progress: Progress
) -> Any:
    try:
        return from_pretrained(spec.ref, local_files_only=True, **kwargs)
    except OSError:
        pass  # not in the local Hugging Face cache
    if not hub_reachable():
        why = "HF_HUB_OFFLINE is set" if hub_disabled_by_env() else "no model hub is reachable from here"
        raise ModelLoadError(
            f"cannot load the hub model {spec.ref!r}: {why} and it is not in the local Hugging Face cache. "
            f"Use the offline pairing {DEFAULT_PAIRING!r} (installs from the package registry: "
            f"{INSTALL_HINT}), or give a local model directory or .gguf file instead."
        )
    progress(f"downloading {spec.ref} from the hub…")
    try:
        return from_pretrained(spec.ref, **kwargs)
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"could not load {spec.ref!r} from the hub: {error}") from error


# --------------------------------------------------------------------------- command line
