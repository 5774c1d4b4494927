"""How a model family's chat prompts are rendered and which tokens end its replies.

Two facts about a chat model are not in its weights and are not reliably in its tokenizer either:

* options its chat template takes. Qwen3's template thinks by default: unless ``enable_thinking``
  is false, the reply is left to open a ``<think>`` block, so every output would start with the
  model's reasoning. With the option off, the template closes an empty thinking block in the prompt
  itself and the reply is the answer.
* tokens that end a reply without being the tokenizer's eos. Llama 3 ends a turn with
  ``<|eot_id|>`` while its base tokenizer's eos is ``<|end_of_text|>``; Qwen ends a turn with
  ``<|im_end|>`` and a document with ``<|endoftext|>``, and its configs do not always list both.

A :class:`ChatFormat` records both for one model (``registry.ModelSpec.chat``). A loaded pair
carries one format for all its prompts (``LoadedPair.chat``, see :meth:`ChatFormat.joined`), which
``engine.chat_ids`` applies and ``pair.end_token_ids`` reads. This module imports nothing heavy:
the registry uses it while drawing the pairing dropdown.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

TemplateValue = bool | int | float | str


@dataclass(frozen=True)
class ChatFormat:
    """Keyword arguments for a model's chat template, and extra tokens that end its replies.

    ``template_options`` are (name, value) pairs, kept sorted by name so that equal formats compare
    and hash equal (a pairing's specs are part of the loaded-pair cache key). Token names absent
    from a tokenizer's vocabulary are ignored at load, so a format may list a family's variants.
    """

    template_options: tuple[tuple[str, TemplateValue], ...] = ()
    end_tokens: tuple[str, ...] = ()
    # The family's turn format, for a tokenizer that carries no chat template of its own (a base
    # model's GGUF: Gemma-3-270M's has none). A tokenizer's own template always wins.
    fallback_template: str = ""

    def __post_init__(self) -> None:
        names = [name for name, _ in self.template_options]
        if len(set(names)) != len(names):
            raise ValueError(f"chat template option given twice: {names}")
        for name, value in self.template_options:
            if not name.isidentifier():
                raise ValueError(f"chat template option {name!r} is not a valid keyword name")
            if not isinstance(value, (bool, int, float, str)):
                raise ValueError(f"chat template option {name}={value!r}: only bool, int, float or str")
        object.__setattr__(self, "template_options", tuple(sorted(self.template_options)))
        object.__setattr__(self, "end_tokens", tuple(dict.fromkeys(self.end_tokens)))

    @property
    def template_kwargs(self) -> dict[str, TemplateValue]:
        """The options as keyword arguments for ``apply_chat_template``."""
        return dict(self.template_options)

    def joined(self, generalist: ChatFormat) -> ChatFormat:
        """One format for a pair whose Specialist has this format.

        Both models share one tokenizer, whose template renders every prompt of the pair, so the
        Generalist and the Cloud's generic Specialist copy read identical ids. Options: this
        (the Specialist's) format's, plus the Generalist's for names this one does not set (one
        model of a custom pairing may be of a family this module does not recognise); where both
        set a name, the Specialist's value wins (:meth:`disagreements` names those). End tokens:
        both lists, since a reply ends where either model would end it.
        """
        options = dict(generalist.template_options) | dict(self.template_options)
        return ChatFormat(
            tuple(options.items()),
            self.end_tokens + generalist.end_tokens,
            self.fallback_template or generalist.fallback_template,
        )

    def template_for(self, tokenizer) -> str | None:
        """The ``chat_template`` argument for ``tokenizer``: None (its own) unless it has none."""
        return self.fallback_template or None if getattr(tokenizer, "chat_template", None) is None else None

    def disagreements(self, generalist: ChatFormat) -> tuple[str, ...]:
        """Option names both formats set to different values (:meth:`joined` keeps this format's)."""
        theirs = dict(generalist.template_options)
        return tuple(name for name, value in self.template_options if name in theirs and theirs[name] != value)


def prompt_ids(tokenizer, user_message: str, chat: ChatFormat) -> list[int]:
    """The ids of a one-turn chat prompt that leaves the assistant to reply, rendered with ``chat``'s options
    (every prompt of a pair, and every LoRA training example, is rendered this one way)."""
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_message}],
        add_generation_prompt=True,
        tokenize=True,
        chat_template=chat.template_for(tokenizer),
        **chat.template_kwargs,
    )
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return list(ids)


# --------------------------------------------------------------------------- families

PLAIN_CHAT = ChatFormat()  # the template as it is; the tokenizer's and the model's own end tokens
CHATML_END_TOKENS = ("<|im_end|>", "<|endoftext|>")
# Qwen2 / Qwen2.5 (Coder included) and SmolLM2 use ChatML turns.
CHATML_CHAT = ChatFormat(end_tokens=CHATML_END_TOKENS)
QWEN3_CHAT = ChatFormat(template_options=(("enable_thinking", False),), end_tokens=CHATML_END_TOKENS)
# <|eom_id|> ends a Llama 3.1 turn that hands over to a tool: here, the end of the reply as well.
LLAMA3_CHAT = ChatFormat(end_tokens=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"))
# Gemma 3 turns: "<start_of_turn>user\n…<end_of_turn>\n", then "<start_of_turn>model\n" for the reply. Gemma has
# no system role; a system message (never sent here) would be rendered as a turn of its own.
_GEMMA3_TURNS = (
    "{{ bos_token }}{% for message in messages %}<start_of_turn>"
    "{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
GEMMA3_CHAT = ChatFormat(end_tokens=("<end_of_turn>", "<eos>"), fallback_template=_GEMMA3_TURNS)

# Tried in order on each clue (a hub id, a file or directory name, a config's model_type), lower-cased.
_FAMILIES: tuple[tuple[re.Pattern[str], ChatFormat], ...] = (
    (re.compile(r"qwen3(?!\d)"), QWEN3_CHAT),
    (re.compile(r"qwen2(?!\d)|smollm"), CHATML_CHAT),
    (re.compile(r"llama-?3(?!\d)"), LLAMA3_CHAT),  # not Llama 1's 30B
    (re.compile(r"gemma-?3(?!\d)"), GEMMA3_CHAT),
)


def family_chat_format(*clues: str) -> ChatFormat:
    """The format of the first known family that a clue names, else PLAIN_CHAT.

    A clue is a hub id ("Qwen/Qwen3-8B"), a file or directory name, or a ``model_type`` ("qwen3").
    Only the last path component of a clue is read: a directory *containing* a Qwen3 model's name
    says nothing about the model inside it.
    """
    for clue in clues:
        name = clue.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
        for pattern, chat in _FAMILIES:
            if pattern.search(name):
                return chat
    return PLAIN_CHAT


def directory_chat_format(directory: Path) -> ChatFormat:
    """A ``save_pretrained`` directory's family format, from its name or its config's model_type."""
    try:
        model_type = str(json.loads((directory / "config.json").read_text()).get("model_type", ""))
    except (OSError, ValueError, AttributeError):
        model_type = ""
    return family_chat_format(directory.name, model_type)
