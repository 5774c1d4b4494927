"""The OpenAI-compatible endpoint judge's error paths against a stub HTTP server: a timeout, HTTP 500 (retried,
then given up), a 400, a body that is not a chat completion, a refusal; its settings come from the environment
and never show the key. (The request and reply of a real server: tests/cloud/test_vllm_judge.py.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specsteer.evaluation.judge_rubric import SCORE_ANSWER_PATTERN
from specsteer.evaluation.judges import EndpointJudge, EndpointSettings, JudgeFailure, request_body

SECRET = "sk-test-0123456789"


def completion(text: str, **message) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text, **message}}]}


class Stub:
    """A server whose next answers are scripted: each a (status, body or None to hang)."""

    def __init__(self) -> None:
        self.script: list[tuple[int, object]] = []
        self.requests: list[tuple[str, dict, dict]] = []

        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 -- the stdlib's name
                length = int(self.headers.get("Content-Length", 0))
                stub.requests.append((self.path, dict(self.headers), json.loads(self.rfile.read(length))))
                status, body = stub.script.pop(0) if stub.script else (200, completion("Rating: [[5]]"))
                if body is None:
                    time.sleep(1.5)  # longer than the client waits
                    return
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    yield server
    server.server.shutdown()
    server.server.server_close()


def judge_for(stub: Stub, **changes) -> EndpointJudge:
    settings = EndpointSettings(url=stub.url, model="judge-model", key=SECRET, timeout_s=0.5, backoff_s=0.01, **changes)
    return EndpointJudge(settings)


def test_a_reply_is_read_and_the_request_has_the_chat_completions_shape(stub):
    stub.script = [(200, completion("Close to her voice.\nRating: [[8]]"))]
    judge = judge_for(stub, max_tokens=64)
    assert judge.ask("Grade this.", SCORE_ANSWER_PATTERN) == "Close to her voice.\nRating: [[8]]"
    path, headers, body = stub.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == f"Bearer {SECRET}"
    assert body == {
        "model": "judge-model",
        "messages": [{"role": "user", "content": "Grade this."}],
        "temperature": 0,
        "max_tokens": 64,
        "n": 1,
    }
    assert judge.identity.key == "endpoint:judge-model|cogenesis-1" and SECRET not in judge.identity.label


def test_a_constrained_request_carries_vllms_structured_outputs():
    settings = EndpointSettings(url="http://judge:8000/v1/", model="m", constrain="regex")
    assert request_body(settings, "p", SCORE_ANSWER_PATTERN)["structured_outputs"] == {"regex": SCORE_ANSWER_PATTERN}
    assert settings.completions_url == "http://judge:8000/v1/chat/completions"
    assert EndpointSettings(url="http://h/v1/chat/completions", model="m").completions_url.endswith(
        "/v1/chat/completions"
    )


def test_a_server_error_is_retried_then_given_up(stub):
    stub.script = [(500, {"error": "busy"}), (200, completion("Rating: [[6]]"))]
    assert judge_for(stub, retries=2).ask("p", SCORE_ANSWER_PATTERN) == "Rating: [[6]]"
    assert len(stub.requests) == 2
    stub.requests.clear()
    stub.script = [(500, {"error": "down"})] * 3
    with pytest.raises(JudgeFailure, match=r"HTTP 500.*after 3 attempts") as failure:
        judge_for(stub, retries=2).ask("p", SCORE_ANSWER_PATTERN)
    assert failure.value.kind == "http" and len(stub.requests) == 3


def test_a_timeout_is_a_timeout(stub):
    stub.script = [(200, None), (200, None)]
    started = time.monotonic()
    with pytest.raises(JudgeFailure, match="did not answer within 0.5 s") as failure:
        judge_for(stub, retries=1).ask("p", SCORE_ANSWER_PATTERN)
    assert failure.value.kind == "timeout" and len(stub.requests) == 2
    assert time.monotonic() - started < 5


def test_a_client_error_is_not_retried(stub):
    stub.script = [(400, {"error": {"message": "unknown field structured_outputs"}})]
    with pytest.raises(JudgeFailure, match="HTTP 400: .*unknown field") as failure:
        judge_for(stub).ask("p", SCORE_ANSWER_PATTERN)
    assert failure.value.kind == "http" and len(stub.requests) == 1


@pytest.mark.parametrize(
    ("body", "kind", "message"),
    [
        (b"<html>gateway</html>", "malformed", "not JSON"),
        ({"object": "list", "data": []}, "malformed", "not a chat completion"),
        ({"choices": [{"message": {"content": None}}]}, "malformed", "no text content"),
        (completion(None, refusal="I can't grade this."), "refusal", "refused"),
    ],
)
def test_garbage_and_refusals_are_named(stub, body, kind, message):
    stub.script = [(200, body)]
    with pytest.raises(JudgeFailure, match=message) as failure:
        judge_for(stub).ask("p", SCORE_ANSWER_PATTERN)
    assert failure.value.kind == kind


def test_nobody_listening_is_unreachable():
    judge = EndpointJudge(EndpointSettings(url="http://127.0.0.1:9/v1", model="m", retries=0, timeout_s=2))
    with pytest.raises(JudgeFailure) as failure:
        judge.ask("p", SCORE_ANSWER_PATTERN)
    assert failure.value.kind == "unreachable"


def test_the_settings_come_from_the_environment_and_never_quote_the_key():
    assert EndpointSettings.from_environment({}) is None
    settings = EndpointSettings.from_environment(
        {
            "SPECSTEER_JUDGE_URL": " http://vllm:8000/v1 ",
            "SPECSTEER_JUDGE_MODEL": "qwen-judge",
            "SPECSTEER_JUDGE_KEY": SECRET,
            "SPECSTEER_JUDGE_TIMEOUT_S": "30",
            "SPECSTEER_JUDGE_CONSTRAIN": "REGEX",
        },
        max_tokens=100,
    )
    assert settings == EndpointSettings(
        "http://vllm:8000/v1", "qwen-judge", SECRET, 30.0, constrain="regex", max_tokens=100
    )
    with pytest.raises(ValueError, match="name the judge's model") as error:
        EndpointSettings.from_environment({"SPECSTEER_JUDGE_URL": "http://h", "SPECSTEER_JUDGE_KEY": SECRET})
    assert SECRET not in str(error.value)
    with pytest.raises(ValueError, match="must start with http"):
        EndpointSettings(url="ftp://h", model="m")
    with pytest.raises(ValueError, match="not printable ASCII"):
        EndpointSettings(url="http://h", model="m", key="clé\n")
    with pytest.raises(ValueError, match="number of seconds"):
        EndpointSettings.from_environment({"SPECSTEER_JUDGE_URL": "http://h", "SPECSTEER_JUDGE_TIMEOUT_S": "soon"})
