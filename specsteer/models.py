"""Loading a Specialist/Generalist pair that shares one tokenizer.

Two runtimes run the models (specsteer.runtime): llama.cpp reads GGUF files directly, with their
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

Run ``python -m specsteer.models prepare [--runtime ...]`` to do the one-time work ahead of time.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from . import llamacpp
from .attention import use_packed_gqa
from .calibration import RuntimeChoice
from .chat import PLAIN_CHAT, ChatFormat
from .machine import read_cpu
from .registry import (
    CACHE_MARKER,
    DEFAULT_PAIRING,
    INSTALL_HINT,
    PAIRINGS,
    ModelSpec,
    Pairing,
    assembled_gguf,
    cache_root,
    converted_cache_ready,
    converted_model_dir,
    cross_tokenizer_message,
    get_pairing,
    gguf_stamp,
    hub_disabled_by_env,
    hub_reachable,
    import_name,
    install_hint,
    package_problems,
)
from .runtime import RUNTIME_CHOICES, RUNTIMES, ModelRuntime, TransformersModel

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

_DTYPE_NAMES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
}
_COPY_BLOCK = 1 << 22
# One assembly or conversion at a time (each reads or writes a GB); re-entrant because a
# conversion first makes sure its GGUF is assembled.
_conversion_lock = threading.RLock()
_STALE_WORK_DIR_S = 6 * 3600


class ModelLoadError(RuntimeError):
    """A model or pairing cannot be loaded; the message says why and what to do."""


@dataclass(frozen=True, eq=False)
class GeneralistTokens:
    """What a cross-tokenizer pair adds (``specsteer.crosstok``): the Generalist's own tokenizer, chat
    format, output rows and end ids, and both vocabularies as the common byte space sees them."""

    tokenizer: PreTrainedTokenizerBase
    chat: ChatFormat
    vocab_size: int
    eos_token_ids: frozenset[int]
    vocabularies: Any  # crosstok.CrossVocabularies


@dataclass
class LoadedPair:
    """Two loaded models and the tokenizer they share (the Specialist's; the Generalist's was checked
    to have the same vocabulary and special tokens). Both models run on the same runtime.

    ``chat`` is how every prompt of the pair is rendered (engine.chat_ids): the Specialist's
    registry format joined with the Generalist's (ChatFormat.joined); its end tokens are in
    ``eos_token_ids`` already."""

    pairing_id: str
    specialist: ModelRuntime
    generalist: ModelRuntime | None  # None: loaded for an Edge whose Cloud runs elsewhere
    tokenizer: PreTrainedTokenizerBase  # shared (compatibility checked at load)
    vocab_size: int  # ids usable by both models (min of padded sizes, >= len(tokenizer))
    eos_token_ids: frozenset[int]
    chat: ChatFormat = PLAIN_CHAT
    runtime_choice: str = ""  # why this runtime runs the request (models.runtime_choice), for its statistics
    # Set on a cross-tokenizer pair: then ``tokenizer``, ``vocab_size``, ``eos_token_ids`` and ``chat``
    # are the Specialist's, and this holds the Generalist's side.
    cross: GeneralistTokens | None = None

    @property
    def runtime(self) -> str:
        return self.specialist.runtime

    def clear_prefix_caches(self) -> None:
        """Forget every idle cached prompt of both models (benchmarks time prompt processing)."""
        for model in (self.specialist, self.generalist):
            if model is not None:
                model.prefix_cache.clear()

    @property
    def precision(self) -> str:
        """What the weights compute in ("fp32", "bf16", "Q4_K_M"); "a / b" when the two differ."""
        small = self.specialist.precision
        large = self.generalist.precision if self.generalist is not None else small
        return small if small == large else f"{small} / {large}"


def _quiet(_: str) -> None:
    """The default progress callback."""


# --------------------------------------------------------------------------- dtype and device


def default_dtype() -> str:
    """"bf16" where bf16 matmuls are fast (CUDA, or a CPU with AVX512-BF16 / AMX), else "fp32"."""
    if torch.cuda.is_available():
        return "bf16"
    return "bf16" if _cpu_has_fast_bf16() else "fp32"


def _cpu_has_fast_bf16() -> bool:
    _, flags = read_cpu()
    if not flags:  # not Linux: fall back to what torch's dispatcher detected
        capability = torch.backends.cpu.get_cpu_capability().upper()
        return "AVX512" in capability or "AMX" in capability
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """"bf16" / "fp32" / "fp16" (or the torch dtype itself); None or "auto" means default_dtype()."""
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
    report = progress or _quiet
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
    stamp.write_text(json.dumps({"sha256": sha256, "path": str(target), "size": info.st_size,
                                 "mtime_ns": info.st_mtime_ns}) + "\n")


def _stamp_matches(stamp: Path, target: Path, sha256: str) -> bool:
    try:
        recorded = json.loads(stamp.read_text())
        info = target.stat()
    except (OSError, ValueError):
        return False
    return (recorded.get("sha256") == sha256 and recorded.get("path") == str(target)
            and recorded.get("size") == info.st_size and recorded.get("mtime_ns") == info.st_mtime_ns)


# --------------------------------------------------------------------------- offline: conversion cache

def prepare_offline(spec: ModelSpec, progress: Progress | None = None) -> Path:
    """The converted ``save_pretrained`` directory of an offline model, converting it once if needed."""
    if spec.kind != "offline":
        raise ValueError(f"{spec.name} is not an offline model")
    target = converted_model_dir(spec)
    with _conversion_lock:
        if not converted_cache_ready(spec):
            _convert(spec, target, progress or _quiet)
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
            str(path.parent), gguf_file=path.name, dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),
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
    model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.is_quantized = False


def _save_converted(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path, spec: ModelSpec
) -> None:
    storage = CACHE_DTYPE if _fits_fp16(model) else torch.float32
    model.to(storage)
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
        return _read(spec, AutoTokenizer.from_pretrained, {}, progress or _quiet)
    directory = cache_root() / "tokenizers" / spec.name
    marker = directory / CACHE_MARKER
    with _conversion_lock:
        if not _marker_matches(marker, spec.sha256):
            gguf_path = offline_gguf(spec, progress)
            (progress or _quiet)(f"reading the tokenizer of {spec.name}…")
            try:
                tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
            except (OSError, ValueError, KeyError) as error:
                raise ModelLoadError(f"could not read the tokenizer of {spec.name} from {gguf_path}: {error}") from error
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
        f"({spec.ref}); use the transformers runtime for it (--runtime transformers).")


def load_llamacpp(spec: ModelSpec, progress: Progress | None = None) -> ModelRuntime:
    path = gguf_path(spec, progress)
    (progress or _quiet)(f"loading {spec.name} (llama.cpp)…")
    try:
        return llamacpp.LlamaCppModel(path, name=spec.name)
    except llamacpp.LlamaCppUnavailable as error:
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
    report = progress or _quiet
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


# --------------------------------------------------------------------------- pairs


def check_tokenizers_match(
    specialist: PreTrainedTokenizerBase, generalist: PreTrainedTokenizerBase, pairing_id: str
) -> None:
    """Refuse a pair whose tokenizers differ: verification compares probabilities id by id."""
    small_vocab, large_vocab = specialist.get_vocab(), generalist.get_vocab()
    if small_vocab != large_vocab:
        differing = sorted(set(small_vocab.items()) ^ set(large_vocab.items()), key=lambda item: item[1])[:3]
        raise ModelLoadError(
            f"pairing {pairing_id!r}: the Specialist's and the Generalist's tokenizers differ "
            f"({len(small_vocab)} vs {len(large_vocab)} tokens; e.g. {differing}). Cross-tokenizer pairings "
            "are not supported yet: SpecSteer's verification compares p_L(y) with p_S0(y) for the same "
            "token id y, so both models must share one vocabulary."
        )
    small_special, large_special = _special_tokens(specialist), _special_tokens(generalist)
    if small_special != large_special:
        differing = sorted(set(small_special.items()) ^ set(large_special.items()))[:3]
        raise ModelLoadError(
            f"pairing {pairing_id!r}: the two tokenizers mark different special tokens (e.g. {differing}); "
            "cross-tokenizer pairings are not supported yet."
        )


def _special_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[int, str]:
    # Which roles (eos, pad) the special tokens play may differ between base and chat models of one
    # family; that is harmless because the end ids of both are merged. The table itself must agree.
    return {index: token.content for index, token in tokenizer.added_tokens_decoder.items() if token.special}


def shared_vocab_size(specialist: ModelRuntime, generalist: ModelRuntime | None,
                      tokenizer: PreTrainedTokenizerBase) -> int:
    """Ids both output layers have; padded rows beyond len(tokenizer) are allowed, too few rows are not.
    Without the Generalist (an Edge alone) the Specialist's; the Cloud's vocabulary then caps it."""
    size = min(model.output_rows for model in (specialist, generalist) if model is not None)
    if size < len(tokenizer):
        raise ModelLoadError(
            f"a model's output layer has {size} rows but the tokenizer has {len(tokenizer)} tokens"
        )
    return size


def end_token_ids(tokenizer: PreTrainedTokenizerBase, models: Iterable[ModelRuntime], vocab_size: int,
                  end_tokens: Iterable[str] = ()) -> frozenset[int]:
    """Every id that ends a generation: the tokenizer's eos, the models' own end ids (generation
    config, or the GGUF's eos / eot), and the registry's ``end_tokens`` (ChatFormat.end_tokens, e.g.
    Llama 3's <|eot_id|>) that the vocabulary has."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    for model in models:
        ids.update(model.end_token_ids)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[token] for token in end_tokens if token in vocab)
    return frozenset(i for i in ids if 0 <= i < vocab_size)


def assemble_pair(
    pairing_id: str,
    specialist: ModelRuntime | PreTrainedModel,
    generalist: ModelRuntime | PreTrainedModel | None,
    tokenizer: PreTrainedTokenizerBase,
    chat: ChatFormat = PLAIN_CHAT,
) -> LoadedPair:
    """A LoadedPair from two loaded models that share ``tokenizer`` and render prompts with ``chat``
    (also used by specsteer.tiny_models).

    A transformers model may be given as is; it is wrapped in a TransformersModel. ``generalist``
    None: the Specialist alone, for an Edge whose Cloud runs elsewhere.
    """
    small = as_runtime(specialist)
    large = as_runtime(generalist) if generalist is not None else None
    if large is not None and small.runtime != large.runtime:
        raise ModelLoadError(f"pairing {pairing_id!r}: both models must run on one runtime "
                             f"({small.runtime} and {large.runtime} given)")
    models = tuple(model for model in (small, large) if model is not None)
    for runtime in models:
        if isinstance(runtime, TransformersModel):
            use_packed_gqa(runtime.model)
    vocab_size = shared_vocab_size(small, large, tokenizer)
    return LoadedPair(
        pairing_id=pairing_id,
        specialist=small,
        generalist=large,
        tokenizer=tokenizer,
        vocab_size=vocab_size,
        eos_token_ids=end_token_ids(tokenizer, models, vocab_size, chat.end_tokens),
        chat=chat,
    )


def assemble_cross_pair(
    pairing_id: str,
    specialist: ModelRuntime | PreTrainedModel,
    generalist: ModelRuntime | PreTrainedModel | None,
    specialist_tokenizer: PreTrainedTokenizerBase,
    generalist_tokenizer: PreTrainedTokenizerBase,
    specialist_chat: ChatFormat = PLAIN_CHAT,
    generalist_chat: ChatFormat = PLAIN_CHAT,
) -> LoadedPair:
    """A LoadedPair of two models with different tokenizers (cross-tokenizer SpecSteer).

    Each side keeps its own tokenizer, chat format and end ids; ``generalist`` None loads the Edge
    alone (its Generalist tokenizer still renders the plain prompt it sends). Raises ModelLoadError
    when the Generalist's tokenizer cannot spell every byte (it re-encodes whatever the Specialist drafts)."""
    from .crosstok import ByteVocabulary, CrossVocabularies

    small = as_runtime(specialist)
    large = as_runtime(generalist) if generalist is not None else None
    if large is not None and small.runtime != large.runtime:
        raise ModelLoadError(f"pairing {pairing_id!r}: both models must run on one runtime "
                             f"({small.runtime} and {large.runtime} given)")
    for runtime in (small, large):
        if isinstance(runtime, TransformersModel):
            use_packed_gqa(runtime.model)
    small_vocab = shared_vocab_size(small, None, specialist_tokenizer)
    small_stops = end_token_ids(specialist_tokenizer, (small,), small_vocab, specialist_chat.end_tokens)
    # An Edge alone does not have the Generalist's rows; it needs only the Generalist's tokenizer.
    large_vocab = shared_vocab_size(large, None, generalist_tokenizer) if large is not None else len(generalist_tokenizer)
    large_stops = end_token_ids(generalist_tokenizer, (large,) if large is not None else (), large_vocab,
                                generalist_chat.end_tokens)
    try:
        # The Generalist re-encodes any text the Specialist drafts, so it alone must spell every byte.
        vocabularies = CrossVocabularies(
            ByteVocabulary.of(specialist_tokenizer, small_vocab, small_stops, every_byte=False),
            ByteVocabulary.of(generalist_tokenizer, large_vocab, large_stops))
    except ValueError as error:
        raise ModelLoadError(f"pairing {pairing_id!r}: {error}") from error
    return LoadedPair(
        pairing_id=pairing_id, specialist=small, generalist=large, tokenizer=specialist_tokenizer,
        vocab_size=small_vocab, eos_token_ids=small_stops, chat=specialist_chat,
        cross=GeneralistTokens(generalist_tokenizer, generalist_chat, large_vocab, large_stops, vocabularies),
    )


def cross_tokenizer_view(pair: LoadedPair) -> LoadedPair:
    """The same two models driven through the cross-tokenizer path, each side with its own copy of
    the one tokenizer: what the byte-space machinery costs, measured against the same-tokenizer method
    on one pair (benchmarks). Any runtime: the path needs only each model's logits."""
    if pair.cross is not None:
        return pair
    return assemble_cross_pair(f"{pair.pairing_id}+cross-path", pair.specialist, pair.generalist, pair.tokenizer,
                               pair.tokenizer, pair.chat, pair.chat)


def as_runtime(model: ModelRuntime | PreTrainedModel) -> ModelRuntime:
    return model if isinstance(model, ModelRuntime) else TransformersModel(model)


_MAX_LOADED_PAIRS = 2  # two pairs of the default size already take ~10 GB in bf16
_loaded: OrderedDict[tuple, LoadedPair] = OrderedDict()
_loaded_lock = threading.Lock()
_loading_lock = threading.Lock()  # one load at a time: loads are memory-bound, and callers may share one


def load_pair(
    pairing: str | Pairing = DEFAULT_PAIRING,
    dtype: str | torch.dtype | None = None,
    progress: Progress | None = None,
    device: str | torch.device | None = None,
    runtime: str = "auto",
    edge_only: bool = False,
    method: str = "specsteer",
) -> LoadedPair:
    """Load (or return the already loaded) Specialist/Generalist pair. Thread-safe.

    ``edge_only``: the Specialist alone (its weights and tokenizer), for an Edge whose Cloud runs in
    another process (``generate --cloud``): the Generalist's weights are never read.

    ``runtime``: "llama.cpp" (GGUF files read directly; CPU), "transformers" (any model; ``dtype``
    and ``device`` apply to it only, the dtype defaulting to what this machine computes fast), or
    "auto" (see :func:`runtime_choice`: per ``method``, from this machine's calibration). Raises ModelLoadError with an actionable message; an
    unknown pairing id raises registry.UnknownPairingError (a KeyError and a ValueError).
    """
    pairing = pairing if isinstance(pairing, Pairing) else get_pairing(pairing)
    if pairing.cross_tokenizer:
        raise ModelLoadError(cross_tokenizer_message(pairing))
    report = progress or _quiet
    choice = runtime_choice(pairing, runtime, report, method)
    chosen = choice.runtime
    torch_dtype = resolve_dtype(dtype) if chosen == "transformers" else None
    target_device = (torch.device(device) if device is not None else default_device()) if chosen == "transformers" else None
    key = (pairing.id, pairing.specialist, pairing.generalist, chosen, torch_dtype, str(target_device), edge_only)
    cached = _cached_pair(key)
    if cached is not None:
        cached.runtime_choice = choice.reason  # the latest request's reason (the pair itself is shared)
        return cached
    with _loading_lock:
        cached = _cached_pair(key)  # another caller may have loaded it while this one waited
        if cached is not None:
            cached.runtime_choice = choice.reason
            return cached
        pair = _load_pair_uncached(pairing, chosen, torch_dtype, target_device, report, edge_only)
        with _loaded_lock:
            _loaded[key] = pair
            while len(_loaded) > _MAX_LOADED_PAIRS:
                _loaded.popitem(last=False)
    pair.runtime_choice = choice.reason
    report(f"ready: {pairing.label} ({pair.runtime}, {pair.precision}): {choice.reason}")
    return pair


def choose_runtime(pairing: Pairing, requested: str = "auto", progress: Progress | None = None,
                   method: str = "specsteer") -> str:
    """The runtime a pairing loads on (:func:`runtime_choice` without the reason)."""
    return runtime_choice(pairing, requested, progress, method).runtime


def runtime_choice(pairing: Pairing, requested: str = "auto", progress: Progress | None = None,
                   method: str = "specsteer") -> RuntimeChoice:
    """The runtime a pairing loads on for ``method``, and why.

    "auto": transformers for models that are not GGUF files or where a GPU is present; otherwise the
    runtime this machine's calibration (specsteer.calibration: each working runtime timed once, per CPU)
    estimates fastest for ``method``; llama.cpp when there is no calibration yet, and transformers when
    llama.cpp is missing or failed its check here (the progress callback says why). An explicit
    "llama.cpp" that cannot be honoured raises ModelLoadError naming the fallback.
    """
    if requested not in RUNTIME_CHOICES:
        raise ValueError(f"unknown runtime {requested!r}; choose one of {', '.join(RUNTIME_CHOICES)}")
    if requested == "transformers":
        return RuntimeChoice(requested, "transformers was asked for")
    if pairing.separate_tokenizers:
        if requested == "llama.cpp":
            raise ModelLoadError(f"pairing {pairing.id!r} uses two tokenizers: cross-tokenizer SpecSteer runs on the "
                                 "transformers runtime only (choose auto or transformers).")
        return RuntimeChoice("transformers", "the two models have different tokenizers, and cross-tokenizer "
                             "SpecSteer runs on the transformers runtime only")
    specs = (pairing.specialist, pairing.generalist)
    not_gguf = [spec for spec in specs if spec.kind not in ("offline", "gguf")]
    if requested == "llama.cpp":
        if not_gguf:
            gguf_path(not_gguf[0])  # raises the message that names the transformers runtime
        available, reason = llamacpp.status()
        if not available:
            raise ModelLoadError(reason)
        return RuntimeChoice(requested, "llama.cpp was asked for")
    if not_gguf:
        return RuntimeChoice("transformers", "these models are not GGUF files, and llama.cpp reads only those")
    if torch.cuda.is_available():
        return RuntimeChoice("transformers", "a GPU is present, and transformers runs the models on it")
    available, reason = llamacpp.status()
    if not available:
        (progress or _quiet)(f"{reason} Using the transformers runtime.")
        return RuntimeChoice("transformers", reason)
    from .calibration import choose, saved_calibration

    calibration = saved_calibration(pairing.id)
    choice = choose(calibration, method, RUNTIMES) if calibration is not None else None
    if choice is None:
        return RuntimeChoice("llama.cpp", "both models are GGUF files and llama.cpp passed its check here "
                             "(no calibration of this pairing on this machine: `python -m specsteer.calibration`)")
    if choice.runtime == "transformers" and not converted_ready(pairing):
        # The first transformers load converts both GGUF files (about a minute each); say so, once.
        (progress or _quiet)("auto picks transformers here (measured faster for this method); its first load "
                             "converts the GGUF files once, about a minute per model")
    return choice


def converted_ready(pairing: Pairing) -> bool:
    return all(converted_cache_ready(spec) for spec in (pairing.specialist, pairing.generalist) if spec.kind == "offline")


def _cached_pair(key: tuple) -> LoadedPair | None:
    with _loaded_lock:
        if key in _loaded:
            _loaded.move_to_end(key)
            return _loaded[key]
    return None


def _load_pair_uncached(pairing: Pairing, runtime: str, dtype: torch.dtype | None, device: torch.device | None,
                        progress: Progress, edge_only: bool = False) -> LoadedPair:
    # Tokenizers first: they are small, and a mismatch must be found before a large download or load.
    # An Edge alone cannot compare (the Generalist's tokenizer ships with its weights): its Cloud did.
    tokenizer = load_tokenizer(pairing.specialist, progress)
    if pairing.separate_tokenizers:
        return _load_cross_pair(pairing, tokenizer, dtype, device, progress, edge_only)
    if not edge_only:
        check_tokenizers_match(tokenizer, load_tokenizer(pairing.generalist, progress), pairing.id)
    chat = pair_chat_format(pairing, progress)
    specs = (pairing.specialist,) if edge_only else (pairing.specialist, pairing.generalist)
    if runtime == "llama.cpp":
        models = [load_llamacpp(spec, progress) for spec in specs]
    else:
        models = [TransformersModel(load_model(spec, dtype, progress, device), spec.name) for spec in specs]
    return assemble_pair(pairing.id, models[0], models[1] if len(models) > 1 else None, tokenizer, chat)


def _load_cross_pair(pairing: Pairing, tokenizer: PreTrainedTokenizerBase, dtype: torch.dtype | None,
                     device: torch.device | None, progress: Progress, edge_only: bool) -> LoadedPair:
    """A pairing of two tokenizers (transformers only). The Generalist's tokenizer is loaded even for an
    Edge alone: the Edge renders the plain prompt in the Generalist's ids for the CrossOpen."""
    large_tokenizer = load_tokenizer(pairing.generalist, progress)
    specs = (pairing.specialist,) if edge_only else (pairing.specialist, pairing.generalist)
    models = [TransformersModel(load_model(spec, dtype, progress, device), spec.name) for spec in specs]
    return assemble_cross_pair(pairing.id, models[0], models[1] if len(models) > 1 else None, tokenizer,
                               large_tokenizer, pairing.specialist.chat, pairing.generalist.chat)


def pair_chat_format(pairing: Pairing, progress: Progress | None = None) -> ChatFormat:
    """The one chat format of a pairing's prompts: the Specialist's, completed by the Generalist's
    (ChatFormat.joined). Options the two set differently are reported, not refused: one tokenizer
    renders every prompt, so one value has to be chosen, and a custom pairing may mix variants."""
    small, large = pairing.specialist.chat, pairing.generalist.chat
    for name in small.disagreements(large):
        (progress or _quiet)(
            f"chat template option {name!r}: the Specialist's {small.template_kwargs[name]!r} is used for every "
            f"prompt, not the Generalist's {large.template_kwargs[name]!r} (both models share one tokenizer)")
    return small.joined(large)


def clear_loaded_pairs() -> None:
    """Forget every loaded pair (their memory is freed once no caller holds them)."""
    with _loaded_lock:
        _loaded.clear()


# --------------------------------------------------------------------------- command line


def _directory_size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def _prepare_command(pairing_id: str, runtime: str) -> int:
    """Everything a pairing needs before its first load on ``runtime``: the verified GGUF files and
    tokenizers (llama.cpp), or the converted weights (transformers)."""
    pairing = get_pairing(pairing_id)
    if pairing.cross_tokenizer:
        print(cross_tokenizer_message(pairing), file=sys.stderr)
        return 1
    say = lambda line: print(f"  {line}", flush=True)  # noqa: E731
    try:
        chosen = choose_runtime(pairing, runtime, say)
    except ModelLoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"preparing {pairing.id} for the {chosen} runtime", flush=True)
    for spec in (pairing.specialist, pairing.generalist):
        if spec.kind != "offline":
            print(f"{spec.name}: a {spec.kind} model, nothing to prepare")
            continue
        started = time.perf_counter()
        try:
            load_tokenizer(spec, say)
            path = offline_gguf(spec, say) if chosen == "llama.cpp" else prepare_offline(spec, say)
        except ModelLoadError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        size = path.stat().st_size if path.is_file() else _directory_size(path)
        print(f"{spec.name}: {path} ({size / 1e9:.2f} GB, {time.perf_counter() - started:.1f} s)", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specsteer.models", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="make an offline pairing ready to load (verify, assemble, convert)")
    prepare.add_argument("--pairing", default=DEFAULT_PAIRING, choices=sorted(PAIRINGS))
    prepare.add_argument("--runtime", default="auto", choices=RUNTIME_CHOICES,
                         help="llama.cpp needs the verified GGUF files; transformers a one-time conversion")
    args = parser.parse_args(argv)
    return _prepare_command(args.pairing, args.runtime)


if __name__ == "__main__":
    sys.exit(main())
