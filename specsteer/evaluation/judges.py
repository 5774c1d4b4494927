"""The judges that answer the rubric's prompts (``specsteer.evaluation.judge_rubric``): any OpenAI-compatible
endpoint the operator configures, or the offline Generalist here as a weak fallback.

* :class:`EndpointJudge` — ``POST {url}/chat/completions`` (OpenAI's API, vLLM's ``vllm serve`` and the other
  servers that copy it) with one user message, temperature 0 and a bounded ``max_tokens``, over an httpx
  client with a connect and a read timeout. A timeout, a connection failure, HTTP 429 or a 5xx is retried a
  bounded number of times with a growing pause; then, and at once for any other failure, it raises
  :class:`JudgeFailure` naming the kind (``timeout``, ``unreachable``, ``http``, ``malformed`` for a body that
  is no chat completion, ``refusal`` for a reply the API marks as one). Where the server can constrain its
  output (vLLM's ``structured_outputs``), ``constrain="regex"`` holds the answer to the rubric's answer pattern.
  What it reaches comes from the operator's environment only (:meth:`EndpointSettings.from_environment`:
  ``SPECSTEER_JUDGE_URL``, ``SPECSTEER_JUDGE_MODEL``, ``SPECSTEER_JUDGE_KEY``, ...), read by the command line's
  composition root; nothing a visitor of the app sends reaches it (the app only shows stored scores). The
  key travels in the Authorization header and is never printed, stored or part of the judge's identity.
* :class:`LocalJudge` — the Generalist of a loaded pair (the offline pairing's 1.5B model), greedy, through the
  project's engine (method ``llm``, so its prefix cache reads a record's shared context once), stopped as soon
  as its answer holds a grade or a verdict in double brackets. Its scores are
  labelled a **weak judge** (:attr:`JudgeIdentity.weak`) wherever they appear: a small model's grades are a
  plumbing check and a rough signal, not the paper's GPT-4 judge.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from specsteer.evaluation.judge_rubric import ANSWER_CUES
from specsteer.stores.judges import RUBRIC_VERSION, JudgeIdentity, ReasonKind

if TYPE_CHECKING:
    import httpx

    from specsteer.models.pair import LoadedPair

JUDGE_URL_ENV = "SPECSTEER_JUDGE_URL"
JUDGE_MODEL_ENV = "SPECSTEER_JUDGE_MODEL"
JUDGE_KEY_ENV = "SPECSTEER_JUDGE_KEY"
JUDGE_TIMEOUT_ENV = "SPECSTEER_JUDGE_TIMEOUT_S"
JUDGE_CONSTRAIN_ENV = "SPECSTEER_JUDGE_CONSTRAIN"

DEFAULT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 10.0
DEFAULT_RETRIES = 2
DEFAULT_MAX_TOKENS = 512
MAX_REPLY_CHARS = 20_000  # a longer reply is kept cut: it is stored with the score
Constrain = Literal["", "regex"]


class JudgeFailure(Exception):
    """No answer to read: ``kind`` says what failed, the message says it in a sentence."""

    def __init__(self, kind: ReasonKind, message: str) -> None:
        super().__init__(message)
        self.kind: ReasonKind = kind


class Judge(Protocol):
    """Answers one rubric prompt at a time; JudgeFailure when there is no answer."""

    @property
    def identity(self) -> JudgeIdentity: ...

    def ask(self, prompt: str, answer_pattern: str) -> str:
        """The judge's reply to ``prompt``; ``answer_pattern`` is the regular expression the reply should match
        (a judge that can constrain its output may use it)."""
        ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- an OpenAI-compatible endpoint


@dataclass(frozen=True)
class EndpointSettings:
    """Where the operator's judge is and how to ask it. ``key`` may be empty (a local vLLM server)."""

    url: str
    model: str
    key: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    max_tokens: int = DEFAULT_MAX_TOKENS
    constrain: Constrain = ""
    backoff_s: float = 1.0  # the pause before the first retry, doubled before each next

    def __post_init__(self) -> None:
        problems = []
        if not self.url.startswith(("http://", "https://")):
            problems.append(f"the judge's URL must start with http:// or https:// (${JUDGE_URL_ENV})")
        if not self.model.strip():
            problems.append(f"name the judge's model (${JUDGE_MODEL_ENV})")
        if not 0 < self.timeout_s <= 3600:
            problems.append(f"the judge's timeout must be over 0 and at most 3600 s (${JUDGE_TIMEOUT_ENV})")
        if not 0 <= self.retries <= 10:
            problems.append("the judge's retries must be 0 to 10")
        if not 1 <= self.max_tokens <= 8192:
            problems.append("the judge's max tokens must be 1 to 8192")
        if self.constrain not in ("", "regex"):
            problems.append(f"${JUDGE_CONSTRAIN_ENV} must be empty or 'regex' (vLLM's structured outputs)")
        if self.key and not (self.key.isascii() and self.key.isprintable()):
            problems.append(f"${JUDGE_KEY_ENV} holds a character that is not printable ASCII")
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], **overrides: Any) -> EndpointSettings | None:
        """The operator's judge from ``environ``; None when ``SPECSTEER_JUDGE_URL`` is not set. ValueError
        (never quoting the key) for a setting that cannot work."""
        url = environ.get(JUDGE_URL_ENV, "").strip()
        if not url:
            return None
        timeout = environ.get(JUDGE_TIMEOUT_ENV, "").strip()
        try:
            timeout_s = float(timeout) if timeout else DEFAULT_TIMEOUT_S
        except ValueError:
            raise ValueError(f"${JUDGE_TIMEOUT_ENV} must be a number of seconds") from None
        values: dict[str, Any] = {
            "url": url,
            "model": environ.get(JUDGE_MODEL_ENV, "").strip(),
            "key": environ.get(JUDGE_KEY_ENV, "").strip(),
            "timeout_s": timeout_s,
            "constrain": environ.get(JUDGE_CONSTRAIN_ENV, "").strip().lower(),
        }
        return cls(**{**values, **overrides})

    @property
    def completions_url(self) -> str:
        """``{url}/chat/completions``, or the URL itself when it names that path already."""
        base = self.url.rstrip("/")
        return base if base.endswith("/chat/completions") else f"{base}/chat/completions"


def request_body(settings: EndpointSettings, prompt: str, answer_pattern: str) -> dict[str, Any]:
    """The chat completion request for one prompt (greedy, bounded)."""
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": settings.max_tokens,
        "n": 1,
    }
    if settings.constrain == "regex":
        body["structured_outputs"] = {"regex": answer_pattern}
    return body


def reply_text(body: object) -> str:
    """The assistant's text of a chat completion response; JudgeFailure (malformed, or refusal when the API
    marks one) for anything else."""
    try:
        message = body["choices"][0]["message"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        raise JudgeFailure(
            "malformed", "the endpoint's reply is not a chat completion (no choices[0].message)"
        ) from None
    if not isinstance(message, dict):
        raise JudgeFailure("malformed", "the endpoint's reply is not a chat completion (its message is no object)")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        raise JudgeFailure("refusal", f"the endpoint refused: {refusal.strip()[:200]!r}")
    content = message.get("content")
    if not isinstance(content, str):
        raise JudgeFailure("malformed", "the endpoint's reply has no text content")
    return content[:MAX_REPLY_CHARS]


class EndpointJudge:
    """A judge behind an OpenAI-compatible chat completions endpoint (see the module's text)."""

    def __init__(self, settings: EndpointSettings, sleep: Callable[[float], None] = time.sleep) -> None:
        import httpx

        self.settings = settings
        self._sleep = sleep
        headers = {"Authorization": f"Bearer {settings.key}"} if settings.key else {}
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(settings.timeout_s, connect=min(CONNECT_TIMEOUT_S, settings.timeout_s)),
        )
        self._identity = JudgeIdentity(settings.model, "endpoint")

    @property
    def identity(self) -> JudgeIdentity:
        return self._identity

    def ask(self, prompt: str, answer_pattern: str) -> str:
        body = request_body(self.settings, prompt, answer_pattern)
        attempts = self.settings.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return self._once(body)
            except _Retryable as error:
                if attempt == attempts:
                    raise JudgeFailure(error.kind, f"{error} (after {attempts} attempts)") from None
                self._sleep(self.settings.backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def _once(self, body: dict[str, Any]) -> str:
        import httpx

        try:
            response = self._client.post(self.settings.completions_url, json=body)
        except httpx.TimeoutException:
            raise _Retryable("timeout", f"the judge did not answer within {self.settings.timeout_s:g} s") from None
        except httpx.TransportError as error:
            raise _Retryable("unreachable", f"the judge could not be reached ({type(error).__name__})") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retryable("http", f"the judge answered HTTP {response.status_code}{_detail(response)}")
        if response.status_code != 200:
            raise JudgeFailure("http", f"the judge answered HTTP {response.status_code}{_detail(response)}")
        try:
            document = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise JudgeFailure("malformed", f"the endpoint's reply is not JSON: {response.text[:80]!r}") from None
        return reply_text(document)

    def close(self) -> None:
        self._client.close()


class _Retryable(Exception):
    def __init__(self, kind: ReasonKind, message: str) -> None:
        super().__init__(message)
        self.kind: ReasonKind = kind


def _detail(response: httpx.Response) -> str:
    text = " ".join(response.text.split())[:160]
    return f": {text}" if text else ""


# --------------------------------------------------------------------------- the offline Generalist, a weak judge

DEFAULT_LOCAL_MAX_TOKENS = 160
# A grade or a verdict in double brackets, the rubric's end of an answer (not "[[N]]" echoed from the prompt).
_ANSWERED = re.compile(r"\[\[\s*(?:[+-]?\d+(?:\.\d+)?|A|B|C|tie)\s*\]\]", re.IGNORECASE)
CUE_TOKENS = 4  # "10]]" or "tie]]" after the cue
# The local judge's answers are stored under their own rubric name: one cut at the budget is finished from the
# rubric's cue, which an answer written whole never needs, so its grades are not mixed with grades read without it.
LOCAL_RUBRIC = f"{RUBRIC_VERSION}+cue"


class LocalJudge:
    """The Generalist of ``pair`` answering greedily, at most ``max_new_tokens`` tokens: a weak judge.

    A small model often spends its budget on headed analysis and never reaches the grade. Such an answer is
    finished the way constrained decoding would hold it: the judge's own reasons, then the rubric's cue
    (``Rating: [[`` or ``Verdict: [[``, :data:`~specsteer.evaluation.judge_rubric.ANSWER_CUES`), and the grade
    the model writes after it, at most :data:`CUE_TOKENS` more tokens. The stored answer shows the cue where it
    was added, and the scores are kept under :data:`LOCAL_RUBRIC`."""

    def __init__(
        self,
        pair: LoadedPair,
        model: str,
        max_new_tokens: int = DEFAULT_LOCAL_MAX_TOKENS,
        cancel: threading.Event | None = None,
    ) -> None:
        if not 1 <= max_new_tokens <= 2048:
            raise ValueError("the local judge's max tokens must be 1 to 2048")
        self.pair = pair
        self.max_new_tokens = max_new_tokens
        self.cancel = cancel or threading.Event()
        self._identity = JudgeIdentity(model, "local", weak=True, rubric=LOCAL_RUBRIC)

    @property
    def identity(self) -> JudgeIdentity:
        return self._identity

    def ask(self, prompt: str, answer_pattern: str) -> str:
        """The Generalist's greedy answer, ended as soon as it holds a complete ``[[…]]`` (what the rubric asks
        it to end with: what would follow is not read); cut at the budget without one, it is finished from the
        answer pattern's cue."""
        from specsteer.engine.request import chat_ids
        from specsteer.protocol.link import CloudRefused

        try:
            ids = chat_ids(self.pair.tokenizer, prompt, self.pair.chat)
            answer = self._greedy(ids, self.max_new_tokens, _ANSWERED.search)
            cue = ANSWER_CUES.get(answer_pattern)
            if cue is None or self.cancel.is_set() or _ANSWERED.search(answer):
                return answer[:MAX_REPLY_CHARS]
            lead = f"{answer.rstrip()}\n\n{cue}"
            lead_ids = list(self.pair.tokenizer.encode(lead, add_special_tokens=False))
            grade = self._greedy(ids + lead_ids, CUE_TOKENS, lambda text: "]]" in text)
        except CloudRefused as error:
            # The in-process Cloud's limits (a prompt longer than a frame holds): asking again would not change
            # it, so the cell is settled without a grade, and the run goes on.
            raise JudgeFailure("refusal", f"the local judge cannot take this prompt: {error}") from None
        return (lead + grade)[:MAX_REPLY_CHARS]

    def _greedy(self, ids: list[int], max_new_tokens: int, enough_when: Callable[[str], object]) -> str:
        """The Generalist's greedy continuation of ``ids``: at most ``max_new_tokens``, stopped early once
        ``enough_when(text)`` holds or the run is cancelled."""
        from specsteer.engine.decode_config import DecodeConfig
        from specsteer.engine.generate import generate_ids
        from specsteer.method.events import Finished

        config = DecodeConfig(method="llm", max_new_tokens=max_new_tokens)
        enough = threading.Event()  # this answer's own stop; the run's cancel stops it too
        text = ""
        for event in generate_ids(self.pair, ids, ids, config, enough):
            if isinstance(event, Finished):
                return event.text
            text += event.text
            if self.cancel.is_set() or enough_when(text):
                enough.set()
        return text

    def close(self) -> None:
        pass
