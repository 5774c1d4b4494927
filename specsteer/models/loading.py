"""Loading a pairing: its Specialist and Generalist as one :class:`LoadedPair`, as a runtime plan says.

What a pair holds, and how its two models are assembled and checked to agree, is ``specsteer.models.pair``'s.
:func:`load_planned` executes a plan
(specsteer.models.planning decides it: each stream's runtime, the prompt reader, the adapter's runtime, the
files): it loads every model the plan names through ``specsteer.models.weights`` (where each model's weights
come from, verified, assembled and converted), attaches the prompt reader, merges an adapter, and keeps the
last pairs loaded for the next request. :func:`load_pair` plans and executes in one call.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace

import torch

from specsteer.models.chat import ChatFormat
from specsteer.models.lora import LORA_RUNTIME_MESSAGE, LoraError, SpecialistLora
from specsteer.models.pair import (
    LoadedPair,
    SplitVocabularyError,
    assemble_cross_pair,
    assemble_pair,
    check_tokenizers_match,
)
from specsteer.models.planning import runtime_plan
from specsteer.models.registry import DEFAULT_PAIRING, Pairing, get_pairing
from specsteer.models.runtime_plan import PROMPT_READER, PlannedModel, RuntimePlan
from specsteer.models.weights import ModelLoadError, Progress, load_llamacpp, load_model, load_tokenizer, quiet
from specsteer.runtimes.attention import use_packed_gqa
from specsteer.runtimes.base import ModelRuntime, TransformersModel
from specsteer.runtimes.hardware import default_device, resolve_dtype

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
    specialist_lora: SpecialistLora | None = None,
) -> LoadedPair:
    """Plan (specsteer.models.planning.runtime_plan) and load (:func:`load_planned`) the Specialist/Generalist
    pair, or return the one already loaded. Thread-safe.

    ``runtime``: "llama.cpp" (GGUF files read directly; CPU), "transformers" (any model; ``dtype`` and
    ``device`` apply to it only, the dtype defaulting to what this machine computes fast), a split such as
    "transformers/llama.cpp", or "auto" (per ``method``, from this machine's calibration). ``specialist_lora``:
    the Edge's Specialist with that adapter merged in (only transformers serves one: "auto" plans it there,
    "llama.cpp" is refused). ``edge_only``: the Specialist alone (its weights and tokenizer), for an Edge whose
    Cloud runs in another process (``generate --cloud``): the Generalist's weights are never read. Raises
    ModelLoadError with an actionable message; an unknown pairing id raises registry.UnknownPairingError (a
    KeyError and a ValueError).
    """
    pairing = pairing if isinstance(pairing, Pairing) else get_pairing(pairing)
    plan = runtime_plan(pairing, runtime, progress, method, lora=specialist_lora is not None)
    return load_planned(pairing, plan, dtype, progress, device, edge_only, specialist_lora)


def load_planned(
    pairing: Pairing,
    plan: RuntimePlan,
    dtype: str | torch.dtype | None = None,
    progress: Progress | None = None,
    device: str | torch.device | None = None,
    edge_only: bool = False,
    specialist_lora: SpecialistLora | None = None,
) -> LoadedPair:
    """The pair ``plan`` describes (every model it names on its runtime, the prompt reader attached, the adapter
    merged), or the one already loaded. Where auto's split is refused at load (the GGUF's token ids disagree),
    the plan's fallback loads instead, saying so; a split asked for by name is refused."""
    report = progress or quiet
    if specialist_lora is not None and not plan.lora:
        raise ValueError("a LoRA Specialist loads only on a plan made for one (runtime_plan(..., lora=True))")
    try:
        pair = _load_cached(pairing, plan, dtype, device, report, edge_only)
    except SplitVocabularyError as error:
        if plan.fallback is None:
            raise  # a split asked for by name is refused, not replaced
        report(f"{error}; running both models on {plan.fallback.runtime} instead")
        plan = plan.refused(str(error))
        pair = _load_cached(pairing, plan, dtype, device, report, edge_only)
    report(f"ready: {pairing.label} ({pair.runtime}, {pair.precision}): {plan.reason}")
    if specialist_lora is None:
        return pair
    adapted = with_specialist_lora(pair, specialist_lora, report)
    adapted.runtime_plan, adapted.runtime_choice = plan, plan.reason
    return adapted


def _load_cached(
    pairing: Pairing,
    plan: RuntimePlan,
    dtype: str | torch.dtype | None,
    device: str | torch.device | None,
    report: Progress,
    edge_only: bool,
) -> LoadedPair:
    models = plan.models(pairing, edge_only)
    on_torch = any(model.runtime == "transformers" and not model.dtype for model in models)
    torch_dtype = resolve_dtype(dtype) if on_torch else None
    target_device = (torch.device(device) if device is not None else default_device()) if on_torch else None
    key = (pairing.id, models, torch_dtype, str(target_device))
    cached = _cached_pair(key)
    if cached is None:
        with _loading_lock:
            cached = _cached_pair(key)  # another caller may have loaded it while this one waited
            if cached is None:
                cached = _load_pair_uncached(pairing, models, torch_dtype, target_device, report)
                with _loaded_lock:
                    _loaded[key] = cached
                    while len(_loaded) > _MAX_LOADED_PAIRS:
                        _loaded.popitem(last=False)
    # The latest request's choice and reason (the pair itself is shared).
    cached.runtime_plan = plan
    cached.runtime_choice = plan.reason
    return cached


_MAX_ADAPTED_PAIRS = 2  # each holds a merged copy of its Specialist beside the base pair's
_adapted: OrderedDict[tuple, tuple[LoadedPair, LoadedPair]] = OrderedDict()


def with_specialist_lora(pair: LoadedPair, lora: SpecialistLora, progress: Progress | None = None) -> LoadedPair:
    """``pair`` with its Edge's Specialist replaced by a copy that has ``lora`` merged in (kept for the next
    request); the base Specialist stays the Cloud's generic copy (:meth:`LoadedPair.cloud_side`). Raises
    LoraError (a ModelLoadError) for another runtime, a cross-tokenizer pair or another base model."""
    from specsteer.models.lora import check_base, merged_specialist

    if pair.lora is not None:
        pair = pair.cloud_side()
    if not isinstance(pair.specialist, TransformersModel):
        raise LoraError(LORA_RUNTIME_MESSAGE)
    key = (id(pair), lora.path, lora.digest)
    with _loaded_lock:
        found = _adapted.get(key)
        if found is not None and found[0] is pair:
            _adapted.move_to_end(key)
            return found[1]
    base = pair.specialist
    check_base(lora, base.model, base.name)
    (progress or quiet)(f"merging the LoRA adapter {lora.label} into a copy of the Specialist…")
    merged = TransformersModel(merged_specialist(base.model, lora), f"{base.name}+{lora.label}")
    use_packed_gqa(merged.model)
    adapted = replace(pair, specialist=merged, generic_specialist=base, lora=lora)
    with _loaded_lock:
        _adapted[key] = (pair, adapted)
        while len(_adapted) > _MAX_ADAPTED_PAIRS:
            _adapted.popitem(last=False)
    return adapted


def on_streams(pair: LoadedPair, edge: torch.cuda.Stream | None, cloud: torch.cuda.Stream | None) -> LoadedPair:
    """``pair`` (transformers models, no adapter) with the Edge's Specialist passing on the CUDA stream ``edge`` and
    the Cloud's Generalist and generic copy on ``cloud``: one GPU standing in for the two machines (the same
    weights; each side its own caches and queue, so a Cloud reading ahead runs beside the Edge)."""
    models = (pair.specialist, pair.generalist)
    if pair.lora is not None or not all(isinstance(model, TransformersModel) for model in models):
        raise ValueError("streams are for a pair of transformers models without an adapter")
    small, large = pair.specialist, pair.generalist
    assert isinstance(small, TransformersModel) and isinstance(large, TransformersModel)
    return replace(
        pair,
        specialist=TransformersModel(small.model, small.name, stream=edge),
        generalist=TransformersModel(large.model, large.name, stream=cloud),
        generic_specialist=TransformersModel(small.model, f"{small.name} (the Cloud's generic copy)", stream=cloud),
    )


def release_specialist_lora(adapted: LoadedPair) -> None:
    """Forget the merged copy :func:`with_specialist_lora` kept for ``adapted`` (per-record adapters: a record's
    copy is never asked for again), so that its memory goes once no caller holds it."""
    with _loaded_lock:
        for key, (_, kept) in list(_adapted.items()):
            if kept is adapted:
                del _adapted[key]


def _cached_pair(key: tuple) -> LoadedPair | None:
    with _loaded_lock:
        if key in _loaded:
            _loaded.move_to_end(key)
            return _loaded[key]
    return None


def _load_pair_uncached(
    pairing: Pairing,
    planned: tuple[PlannedModel, ...],
    dtype: torch.dtype | None,
    device: torch.device | None,
    progress: Progress,
) -> LoadedPair:
    """Every model of ``planned`` (the plan's models: the Specialist, the Generalist unless an Edge loads alone,
    the prompt reader where there is one) on its runtime, assembled into one pair."""
    streams = [model for model in planned if model.role != PROMPT_READER]
    edge_only = len(streams) == 1
    # Tokenizers first: they are small, and a mismatch must be found before a large download or load.
    # An Edge alone cannot compare (the Generalist's tokenizer ships with its weights): its Cloud did.
    tokenizer = load_tokenizer(pairing.specialist, progress)
    if pairing.separate_tokenizers:
        large_tokenizer = load_tokenizer(pairing.generalist, progress)  # an Edge alone renders the CrossOpen too
        models = _load_models(streams, dtype, device, progress)
        return assemble_cross_pair(
            pairing.id,
            models[0],
            None if edge_only else models[1],
            tokenizer,
            large_tokenizer,
            pairing.specialist.chat,
            pairing.generalist.chat,
        )
    if not edge_only:
        check_tokenizers_match(tokenizer, load_tokenizer(pairing.generalist, progress), pairing.id)
    chat = pair_chat_format(pairing, progress)
    models = _load_models(streams, dtype, device, progress)
    for reader in (model for model in planned if model.role == PROMPT_READER):
        attach_prompt_reader(models[0], reader, progress)
    return assemble_pair(pairing.id, models[0], None if edge_only else models[1], tokenizer, chat)


def _load_models(
    planned: list[PlannedModel], dtype: torch.dtype | None, device: torch.device | None, progress: Progress
) -> list[ModelRuntime]:
    """Each model on its runtime."""
    return [
        load_llamacpp(model.spec, progress)
        if model.runtime == "llama.cpp"
        else TransformersModel(load_model(model.spec, dtype, progress, device), model.spec.name)
        for model in planned
    ]


def attach_prompt_reader(model: ModelRuntime, reader: PlannedModel, progress: Progress) -> None:
    """Have the Specialist's conversion (in the plan's dtype: fp32, or bf16 where this CPU proved it fast) read
    its long prompts for llama.cpp (runtimes.prompt_handoff). Where that cannot be (no conversion can be made,
    another state layout), llama.cpp reads them itself and the progress callback says why: a slower first
    token, never a failed load."""
    from specsteer.runtimes.prompt_handoff import HandoffUnsupported

    spec = reader.spec
    try:
        loaded = load_model(spec, reader.dtype, progress, "cpu")
        model.attach_prompt_reader(TransformersModel(loaded, f"{spec.name} {reader.dtype}"))  # type: ignore[attr-defined]
    except (ModelLoadError, HandoffUnsupported) as error:
        progress(f"the Specialist's prompts stay with llama.cpp: {error}")


def pair_chat_format(pairing: Pairing, progress: Progress | None = None) -> ChatFormat:
    """The one chat format of a pairing's prompts: the Specialist's, completed by the Generalist's
    (ChatFormat.joined). Options the two set differently are reported, not refused: one tokenizer
    renders every prompt, so one value has to be chosen, and a custom pairing may mix variants."""
    small, large = pairing.specialist.chat, pairing.generalist.chat
    for name in small.disagreements(large):
        (progress or quiet)(
            f"chat template option {name!r}: the Specialist's {small.template_kwargs[name]!r} is used for every "
            f"prompt, not the Generalist's {large.template_kwargs[name]!r} (both models share one tokenizer)"
        )
    return small.joined(large)


def clear_loaded_pairs() -> None:
    """Forget every loaded pair (their memory is freed once no caller holds them)."""
    with _loaded_lock:
        _loaded.clear()
        _adapted.clear()
