"""The endpoint judge against a real vLLM OpenAI-compatible server on the tiny model (``tiny-vllm-test``'s Generalist,
fp32, byte-level tokenizer with a chat template): the request reaches ``/v1/chat/completions`` and its reply is
read; a random model's free answers are mostly unreadable, so each cell holds a grade or the stored reason;
held to the rubric's answer pattern by vLLM's structured outputs, every cell gets a grade and every pair a
verdict; an unknown model name is an HTTP error stored as such.

The server is launched once for the module by ``specsteer.cloud.vllm.launch`` (as tests/cloud/test_vllm_cloud.py
launches its engines) from ``.venv-vllm``; without that environment the module is skipped, unless
``SPECSTEER_REQUIRE_VLLM=1``."""

from __future__ import annotations

import os
import re

import pytest
from evaluation.test_judge import MemoryJudgeStore

from specsteer.cloud.vllm import EngineSettings, save_pair, vllm_available
from specsteer.cloud.vllm.launch import launch_engine, wait_ready
from specsteer.evaluation.judge_rubric import SCORE_ANSWER_PATTERN, VERDICT_ANSWER_PATTERN, JudgeContext
from specsteer.evaluation.judge_run import JudgePlan, judge_run_events
from specsteer.evaluation.judges import EndpointJudge, EndpointSettings
from specsteer.method.events import GenerationStats
from specsteer.models.tiny import VLLM_PAIRING_ID, shared_test_pair
from specsteer.stores.runs import CellResult, GridPoint

_MISSING = vllm_available()
if _MISSING and os.environ.get("SPECSTEER_REQUIRE_VLLM") == "1":
    raise RuntimeError(f"SPECSTEER_REQUIRE_VLLM=1 but vLLM cannot run here: {_MISSING}")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=f"vLLM not installed: {_MISSING}")]

NAME = "judge"  # the served model name launch_engine gives the role
POINTS = (GridPoint("llm"), GridPoint("specsteer", 1.0, 1.0))
# Short: the tiny tokenizer spends a token per byte, and the model reads 4,096 positions.
CONTEXT = JudgeContext("Write a note to the team.", "Name: Ada\nWriting_style: dry", (("Memo", "Tea at five."),))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-judge")
    generalist_dir, _ = save_pair(shared_test_pair(VLLM_PAIRING_ID), root / "models")
    settings = EngineSettings(dtype="float32", max_model_len=4096, kv_cache_bytes=64 * 2**20, threads=1)
    engine = launch_engine(NAME, generalist_dir, settings, root / "logs")
    try:
        wait_ready([engine], timeout_s=900)
        yield engine
    finally:
        engine.stop()


def judged(server, records=2, pairwise=False, **settings):
    cells = [
        CellResult(f"r{n}", point, f"Output {n} of {point.method}: a short note.", {}, GenerationStats(point.method))
        for n in range(records)
        for point in POINTS
    ]
    order = [f"r{n}" for n in range(records)]
    judge = EndpointJudge(EndpointSettings(url=f"{server.url}/v1", timeout_s=120, retries=1, **settings))
    store = MemoryJudgeStore()
    plan = JudgePlan(criteria=("personalization",), pairwise=pairwise)
    try:
        events = list(judge_run_events(1, cells, dict.fromkeys(order, CONTEXT), order, judge, store, plan))
    finally:
        judge.close()
    return events[-1], store


def test_a_free_answer_is_read_or_its_cell_says_why(server):
    done, store = judged(server, model=NAME, max_tokens=24)
    scores = store.scores(1)
    assert done.asked == 4 and len(scores) == 4
    for score in scores:
        assert (score.score is None) == (score.reason is not None)
        assert score.reason_kind in (None, "malformed", "refusal")  # the server answered every request
        assert score.answer  # the reply's text, kept with the cell
        assert score.judge.model == NAME and score.judge.kind == "endpoint" and not score.judge.weak


def test_held_to_the_rubrics_pattern_every_cell_gets_a_grade_and_every_pair_a_verdict(server):
    done, store = judged(server, pairwise=True, model=NAME, max_tokens=700, constrain="regex")
    assert done.outcomes == {"scored": 4, "verdict": 4}
    for score in store.scores(1):
        assert re.fullmatch(SCORE_ANSWER_PATTERN, score.answer) and 1 <= score.score <= 10
    for verdict in store.verdicts(1):
        assert re.fullmatch(VERDICT_ANSWER_PATTERN, verdict.answer) and verdict.winner in ("first", "second", "tie")


def test_a_model_the_server_does_not_serve_is_an_http_error_stored_with_its_reason(server):
    done, store = judged(server, records=1, model="no-such-model", max_tokens=8)
    assert done.outcomes == {"http": 2}
    assert all("HTTP 404" in score.reason and score.score is None for score in store.scores(1))
