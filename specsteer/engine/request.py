"""What a generation answers: the request, its retrieval and both prompts built on the device, and a prompt's ids."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specsteer.models.chat import PLAIN_CHAT, ChatFormat, prompt_ids

if TYPE_CHECKING:  # tasks imports the retrieval stack, which prepare() loads only when it is called
    from specsteer.data.tasks import PromptPair, PromptStyle


@dataclass
class Request:
    task: str
    input_text: str
    history: Sequence = ()
    retrieval_k: int = 3
    noise_items: Sequence = ()  # appended to the Specialist's context (robustness study)
    prompt_style: PromptStyle = "paper"  # tasks.PROMPT_STYLES: the paper's templates, or "clean" (no field labels)
    profile: str | None = None  # a persona's user profile text (the cogenesis task); private like the history


@dataclass
class Prepared:
    prompts: PromptPair
    retrieved: list = field(default_factory=list)  # the history items BM25 picked, best first, then any noise items
    scores: list[float] = field(default_factory=list)  # BM25 score of each picked history item (noise has none)


def prepare(request: Request) -> Prepared:
    """Retrieve from the history (on the device) and build both prompts."""
    from specsteer.data.retrieval import retrieve_scored
    from specsteer.data.tasks import build_prompts

    scored = retrieve_scored(request.task, request.input_text, list(request.history), request.retrieval_k)
    retrieved = [item for item, _ in scored] + list(request.noise_items)
    prompts = build_prompts(
        request.task, request.input_text, retrieved, style=request.prompt_style, profile=request.profile
    )
    return Prepared(prompts, retrieved, [score for _, score in scored])


def chat_ids(tokenizer, user_message: str, chat: ChatFormat = PLAIN_CHAT) -> list[int]:
    """The ids of a one-turn chat prompt that leaves the assistant to reply: the one place a prompt
    becomes ids. ``chat`` is the pair's format (``pair.chat``): its template options (Qwen3's
    ``enable_thinking=False``) apply to every stream's prompt alike."""
    return prompt_ids(tokenizer, user_message, chat)
