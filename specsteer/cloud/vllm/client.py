"""The HTTP client of one vLLM OpenAI-compatible server: one-token completions and their log-probabilities.

:class:`VllmEngine` sends ``/v1/completions`` requests with token-id prompts and reads each answer into a
:class:`Completion`; an engine that does not answer, or answers what this Cloud cannot read, raises
:class:`EngineUnavailable` (the Edge gets code ``engine-unavailable``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specsteer.cloud.refusals import ServiceError

_ENGINE_ERROR_CHARS = 300  # of an engine's error message relayed to the Edge


@dataclass(frozen=True)
class Completion:
    """One ``max_tokens=1`` completion: the token the engine chose (the forced one when forced), its raw
    log-probability, the raw log-probabilities of the candidates asked for, and what it computed."""

    token: int
    logprob: float
    candidates: dict[int, float]
    prompt_tokens: int
    cached_tokens: int

    @property
    def computed_tokens(self) -> int:
        """Prompt tokens the engine ran through the model (not found in its prefix cache)."""
        return self.prompt_tokens - self.cached_tokens


class EngineUnavailable(ServiceError):
    """A vLLM engine did not answer, or answered with an error: the Edge gets code ``engine-unavailable``."""

    def __init__(self, engine: VllmEngine, reason: str):
        super().__init__(
            502, "engine-unavailable", f"The Cloud's vLLM engine for the {engine.role} ({engine.url}) failed: {reason}"
        )


class VllmEngine:
    """A client of one vLLM OpenAI-compatible server (``/v1/completions`` with token-id prompts).

    ``role`` names the model it serves (``generalist`` or ``generic specialist``) in every error.
    Thread-safe: httpx's Client may be shared by the threads sending a round's requests.
    """

    def __init__(self, role: str, url: str, model: str | None = None, timeout_s: float = 120.0):
        import httpx

        self.role = role
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, timeout=timeout_s)
        self.model = model or self._served_model()

    def close(self) -> None:
        self._client.close()

    def healthy(self) -> bool:
        try:
            return self._client.get("/health", timeout=5.0).status_code == 200
        except Exception:
            return False

    def _served_model(self) -> str:
        body = self._get("/v1/models")
        try:
            return str(body["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise EngineUnavailable(self, "/v1/models named no model") from None

    def max_model_len(self) -> int | None:
        body = self._get("/v1/models")
        try:
            return int(body["data"][0]["max_model_len"])
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    def _get(self, path: str) -> dict:
        try:
            response = self._client.get(path)
        except Exception as error:
            raise EngineUnavailable(self, _reason(error)) from None
        if response.status_code != 200:
            raise EngineUnavailable(self, f"HTTP {response.status_code} for {path}")
        return response.json()

    def complete(
        self,
        prompt: Sequence[int],
        force: int | None = None,
        top: int | None = None,
        ids: Sequence[int] | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> Completion:
        """One token after ``prompt``: ``force`` makes it that token; ``top`` asks for the ``top`` likeliest
        tokens' log-probabilities, ``ids`` for those tokens' (one of the two, or neither)."""
        body: dict = {
            "model": self.model,
            "prompt": list(prompt),
            "max_tokens": 1,
            "temperature": temperature,
            "top_p": top_p,
            "logprobs": top or 0,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if seed is not None:
            body["seed"] = seed
        if force is not None:
            body["allowed_token_ids"] = [force]
        if ids:
            body["logprob_token_ids"] = list(ids)
        try:
            response = self._client.post("/v1/completions", json=body)
        except Exception as error:
            raise EngineUnavailable(self, _reason(error)) from None
        if response.status_code == 400:  # the engine refused what the Edge sent (a token id it has no row for)
            raise ServiceError(
                400, "invalid", f"The Cloud's {self.role} engine refused the request: {_error_message(response)}"
            )
        if response.status_code != 200:
            raise EngineUnavailable(self, f"HTTP {response.status_code}: {_error_message(response)}")
        return _completion(self, response.json())


def _completion(engine: VllmEngine, body: dict) -> Completion:
    try:
        choice = body["choices"][0]
        token = int(choice["token_ids"][0])
        logprobs = choice["logprobs"]
        logprob = float(logprobs["token_logprobs"][0])
        candidates = {_token_id(key): float(value) for key, value in (logprobs["top_logprobs"][0] or {}).items()}
        usage = body["usage"]
        details = usage.get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0)
        return Completion(token, logprob, candidates, int(usage["prompt_tokens"]), cached)
    except (KeyError, IndexError, TypeError, ValueError) as error:
        raise EngineUnavailable(engine, f"an answer this Cloud cannot read ({type(error).__name__})") from None


def _token_id(key: str) -> int:
    """``token_id:123`` (the server's ``return_tokens_as_token_ids``) -> 123."""
    prefix, _, number = key.partition(":")
    if prefix != "token_id":
        raise ValueError(f"not a token id key: {key[:40]!r}")
    return int(number)


def _error_message(response) -> str:
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else body.get("message")
        return str(message)[:_ENGINE_ERROR_CHARS]
    except Exception:
        return f"{len(response.content)} bytes"


def _reason(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:_ENGINE_ERROR_CHARS]
