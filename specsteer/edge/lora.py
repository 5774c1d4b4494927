"""Teaching the Edge's Specialist the user's history: a LoRA adapter trained on the device (paper Appendix A.2,
settings of B.5 where a CPU allows), read back by ``specsteer.models.lora``.

The training set is the history itself, the LaMP / OPPU way: each item is the target of its own prompt, the
task's prompt built from the item's own input (its product, title or summary: :data:`ITEM_INPUTS`) with no
other history items in it (the adapter is the "LoRA" setting; retrieval on top of it at generation time is
"LoRA + RAG", SLM+ or SpecSteer with the adapter). Items the evaluation asks about are left out by the caller
(``exclude``: the inputs or targets of those records).

B.5 trains adapters on every linear layer (q, k, v, o, gate, up, down) for 5 epochs with a cosine schedule,
sequences up to 1,024 tokens, in bf16. Here: the same layers, epochs and schedule; sequences up to
:attr:`LoraSettings.max_length` (512 by default: a CPU step's time grows with the tokens, and a history item's
prompt and text at the prompts' 150-word item budget fit in it); bf16 only where this CPU computes it fast
(``specsteer.runtimes.hardware.default_dtype``), fp32 elsewhere. The paper's rank, scaling and learning rate
are not legible in our copy of it: :class:`LoraSettings` says what is used instead.

Nothing here sends anything anywhere: the adapter is written to a directory on the device.
"""

from __future__ import annotations

import copy
import json
import math
import os
import resource
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from specsteer.data.history import HistoryItem
from specsteer.data.tasks import build_prompts
from specsteer.models.chat import prompt_ids
from specsteer.models.lora import (
    ADAPTER_WEIGHTS,
    MANIFEST,
    MANIFEST_VERSION,
    SpecialistLora,
    base_fingerprint,
    file_sha256,
    read_lora,
)
from specsteer.models.pair import LoadedPair
from specsteer.runtimes.base import TransformersModel

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# Per task: the item field that becomes the prompt's input, how the input reads, and the field the model
# learns to write. An item without the input field gets the task's plain instruction; one without the
# target field is left out.
ITEM_INPUTS: dict[str, tuple[str, str, str]] = {
    "review": ("description", "Write a review of this product: {}", "reviewText"),
    "abstract": ("title", 'Write an abstract for the paper titled "{}".', "abstract"),
    "writing": ("summary", "Write a post about: {}", "content"),
    "free": ("title", "Write a text titled: {}", "text"),
    "cogenesis": ("title", "Write a text titled: {}", "text"),
}
_PLAIN_INPUTS = {
    "review": "Write a product review.",
    "abstract": "Write a paper abstract.",
    "writing": "Write a post.",
    "free": "Write a text.",
    "cogenesis": "Write a text.",
}


class LoraTrainingError(ValueError):
    """Training that cannot start (no usable item, bad settings, a bad output directory)."""


class TrainingStopped(RuntimeError):
    """Training was stopped before its last step; nothing was written."""


@dataclass(frozen=True)
class LoraSettings:
    """One training run's settings. Paper B.5's rank, scaling, dropout and learning rate are not legible in
    our copy; these are the common LoRA values of the works it follows (OPPU, Salemi & Zamani): rank 8,
    alpha 16, dropout 0.05, learning rate 1e-4 with cosine decay."""

    rank: int = 8
    alpha: int = 16
    dropout: float = 0.05
    learning_rate: float = 1e-4
    epochs: int = 5
    max_length: int = 512  # B.5: 1,024; see the module's docstring
    max_steps: int = 0  # 0: every epoch; else stop after this many optimizer steps
    seed: int = 0
    target_modules: tuple[str, ...] = TARGET_MODULES

    def validate(self) -> LoraSettings:
        problems = []
        if self.rank < 1:
            problems.append("the rank must be at least 1")
        if self.alpha <= 0:
            problems.append("alpha must be positive")
        if not 0 <= self.dropout < 1:
            problems.append("the dropout must be in [0, 1)")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            problems.append("the learning rate must be positive")
        if self.epochs < 1:
            problems.append("epochs must be at least 1")
        if self.max_length < 16:
            problems.append("the maximum sequence length must be at least 16 tokens")
        if self.max_steps < 0:
            problems.append("max steps must be 0 (no cap) or more")
        if problems:
            raise LoraTrainingError("; ".join(problems))
        return self


@dataclass(frozen=True)
class Example:
    """One training sequence: the prompt's ids (not learned) and the target's ids (learned)."""

    prompt: tuple[int, ...]
    target: tuple[int, ...]


@dataclass(frozen=True)
class TrainingProgress:
    """After each optimizer step."""

    step: int
    total_steps: int
    epoch: int
    loss: float
    elapsed_s: float


@dataclass
class TrainingResult:
    lora: SpecialistLora
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


def item_prompt(task: str, item: HistoryItem) -> tuple[str, str] | None:
    """(the user message, the target text) that ``item`` teaches, or None when it has no text to learn."""
    if task not in ITEM_INPUTS:
        raise LoraTrainingError(f"LoRA training supports the tasks {', '.join(ITEM_INPUTS)}, not {task!r}")
    input_key, pattern, target_key = ITEM_INPUTS[task]
    target = (item.fields.get(target_key) or (item.text if task in ("free", "cogenesis") else "")).strip()
    if not target:
        return None
    own_input = item.fields.get(input_key, "").strip()
    instruction = pattern.format(own_input) if own_input else _PLAIN_INPUTS[task]
    return build_prompts(task, instruction, ()).private, target


def _normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


def training_items(task: str, items: Sequence[HistoryItem], exclude: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The (prompt, target) pairs of ``items``, without any item whose input or target text is one of
    ``exclude`` (what the evaluation asks about never enters training)."""
    left_out = {_normalized(text) for text in exclude if text.strip()}
    pairs = []
    for item in items:
        taught = item_prompt(task, item)
        if taught is None:
            continue
        own_input = item.fields.get(ITEM_INPUTS[task][0], "")
        if left_out & {_normalized(taught[1]), _normalized(own_input)}:
            continue
        pairs.append(taught)
    return pairs


def encode_examples(pair: LoadedPair, taught: Sequence[tuple[str, str]], max_length: int) -> list[Example]:
    """Each (prompt, target) as the Specialist's ids: the chat prompt, then the target and the end of the turn,
    cut to ``max_length`` tokens (the target's end is cut first; a prompt that leaves fewer than 8 target
    tokens is cut from its start)."""
    tokenizer = pair.tokenizer
    end = _end_of_turn(pair)
    examples = []
    for prompt_text, target_text in taught:
        prompt = prompt_ids(tokenizer, prompt_text, pair.chat)
        target = list(tokenizer.encode(target_text, add_special_tokens=False)) + [end]
        room = max_length - len(prompt)
        if room < 8:
            prompt = prompt[len(prompt) - (max_length - 8) :]
            room = 8
        examples.append(Example(tuple(prompt), tuple(target[:room])))
    return examples


def _end_of_turn(pair: LoadedPair) -> int:
    vocab = pair.tokenizer.get_vocab()
    for token in pair.chat.end_tokens:
        if token in vocab:
            return int(vocab[token])
    if pair.tokenizer.eos_token_id is None:
        raise LoraTrainingError("the Specialist's tokenizer names no end-of-turn token")
    return int(pair.tokenizer.eos_token_id)


def train_lora(
    pair: LoadedPair,
    task: str,
    items: Sequence[HistoryItem],
    out: str | Path,
    settings: LoraSettings = LoraSettings(),
    *,
    exclude: Sequence[str] = (),
    base_name: str = "",
    base_sha256: str = "",
    progress: Callable[[TrainingProgress], None] | None = None,
    cancel: threading.Event | None = None,
    notes: Mapping[str, Any] | None = None,
) -> TrainingResult:
    """Train an adapter for ``pair``'s Specialist on ``items`` and write it to ``out`` (replacing an adapter
    there). ``pair.specialist`` itself is not changed: a copy is trained.

    The directory is written whole or not at all: into a temporary sibling, renamed at the end. A set
    ``cancel`` (or Ctrl-C) stops after the current step and raises TrainingStopped; nothing is written then.
    ``notes``: more fields for the manifest (what the caller needs to know the adapter again, such as the
    record it was trained for).
    """
    from peft import LoraConfig, get_peft_model
    from transformers import get_cosine_schedule_with_warmup

    settings = settings.validate()
    target = _output_directory(Path(out))
    if not isinstance(pair.specialist, TransformersModel):
        raise LoraTrainingError("LoRA training needs the Specialist on the transformers runtime")
    base = pair.specialist.model
    taught = training_items(task, items, exclude)
    if not taught:
        raise LoraTrainingError(f"no history item has a {task} text to learn from (after leaving out {len(exclude)})")
    examples = encode_examples(pair, taught, settings.max_length)
    steps_per_epoch = len(examples)
    total = settings.epochs * steps_per_epoch
    if settings.max_steps:
        total = min(total, settings.max_steps)
    fingerprint = base_fingerprint(base)
    torch.manual_seed(settings.seed)
    with warnings.catch_warnings():  # peft asks transformers a question it has renamed (a FutureWarning)
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*gradient_checkpointing.*")
        model = get_peft_model(
            copy.deepcopy(base),
            LoraConfig(
                r=settings.rank,
                lora_alpha=settings.alpha,
                lora_dropout=settings.dropout,
                target_modules=list(settings.target_modules),
                task_type="CAUSAL_LM",
            ),
        )
    model.train()
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.learning_rate, weight_decay=0.0)
    schedule = get_cosine_schedule_with_warmup(optimizer, 0, total)
    order = torch.Generator().manual_seed(settings.seed)
    losses: list[float] = []
    started = time.perf_counter()
    step = 0
    with torch.enable_grad():
        for epoch in range(settings.epochs):
            for index in torch.randperm(steps_per_epoch, generator=order).tolist():
                if step >= total:
                    break
                if cancel is not None and cancel.is_set():
                    raise TrainingStopped(f"training stopped after {step} of {total} steps; nothing was written")
                loss = _step(model, examples[index], optimizer, schedule)
                losses.append(loss)
                step += 1
                if progress is not None:
                    progress(TrainingProgress(step, total, epoch + 1, loss, time.perf_counter() - started))
    seconds = time.perf_counter() - started
    manifest = {
        "version": MANIFEST_VERSION,
        "base_model": base_name or pair.specialist.name,
        "base_fingerprint": fingerprint,
        "base_sha256": base_sha256,
        "pairing": pair.pairing_id,
        "task": task,
        "items_used": len(taught),
        "items_given": len(items),
        "items_excluded": len(items) - len(taught),
        "settings": {**asdict(settings), "target_modules": list(settings.target_modules)},
        "dtype": str(base.dtype).removeprefix("torch."),
        "steps": step,
        "training_seconds": round(seconds, 3),
        "seconds_per_step": round(seconds / step, 4) if step else None,
        "peak_rss_mb": _peak_rss_mb(),
        "losses": [round(value, 5) for value in losses],
        **(notes or {}),
    }
    _write(model, manifest, target)
    return TrainingResult(read_lora(target), losses, seconds)


def example_loss(model, example: Example) -> torch.Tensor:
    """The mean cross-entropy of the target's tokens after the prompt. Only the rows that predict a target
    token go through the output layer (on a 150k-token vocabulary it is a large share of a CPU step)."""
    ids = torch.tensor([list(example.prompt) + list(example.target)], device=model.device)
    rows = len(example.target) + 1  # the last prompt position predicts the first target token
    logits = model(input_ids=ids, logits_to_keep=rows).logits[0, :-1]  # [target, vocab]
    target = torch.tensor(example.target, device=logits.device)
    return torch.nn.functional.cross_entropy(logits.float(), target)


def _step(model, example: Example, optimizer, schedule) -> float:
    loss = example_loss(model, example)
    loss.backward()
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())


def _peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports kilobytes)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _output_directory(out: Path) -> Path:
    """``out`` if it may be written: absent, empty, or an earlier adapter (which training replaces)."""
    out = out.expanduser()
    if out.exists():
        if not out.is_dir():
            raise LoraTrainingError(f"{out} is a file; give a directory for the adapter")
        if any(out.iterdir()) and not (out / MANIFEST).is_file():
            raise LoraTrainingError(f"{out} holds other files; give an empty or new directory for the adapter")
    if not out.parent.exists():
        raise LoraTrainingError(f"{out.parent} does not exist")
    return out


def _write(model, manifest: dict, out: Path) -> None:
    """The adapter and its manifest into a temporary sibling of ``out``, then renamed to ``out``."""
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(str(staging), safe_serialization=True)
        manifest["weights_sha256"] = file_sha256(staging / ADAPTER_WEIGHTS)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
        staging.rename(out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
