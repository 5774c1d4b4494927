"""Every method on the tiny pair moved to the tier's device: fp32 keeps the exactness the CPU tests hold (greedy
``sd`` equals ``llm`` token for token, a repeated request reuses its prompts and gives the same output); bf16 runs
and keeps the protocol's invariants (kept drafts within each round's k, the round log adding up to the counts,
every recovered or bonus token among the steered candidates its verdict carried)."""

from __future__ import annotations

import pytest
import torch

from specsteer.cloud.in_process import InProcessCloud
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.catalog import METHOD_INFO, METHODS
from specsteer.method.p3 import P3Params
from specsteer.models.loading import on_streams
from specsteer.models.tiny import tiny_pair, tiny_tokenizer

MAX_NEW = 20
DRAFT_LEN = 4
PLAIN = "Write about the sea and the weather."
PRIVATE = "History: the user writes short reviews and loves quiet mornings. Write about the sea and the weather."
SPECULATIVE = ("specsteer", "sd", "p3", "lightcosteer", "costeer")


@pytest.fixture(scope="module")
def prompts() -> tuple[list[int], list[int]]:
    tokenizer = tiny_tokenizer()
    return tokenizer.encode(PLAIN), tokenizer.encode(PRIVATE)


@pytest.fixture(scope="module")
def fp32_pair(device):
    return tiny_pair(device=device)


@pytest.fixture(scope="module")
def bf16_pair(device):
    return tiny_pair(dtype=torch.bfloat16, device=device)


def _run(pair, prompts, method: str, **settings):
    plain, private = prompts
    config = DecodeConfig(method=method, max_new_tokens=MAX_NEW, draft_len=DRAFT_LEN, **settings)
    return collect(generate_ids(pair, plain, private, config))


def test_the_pair_runs_on_the_device(fp32_pair, bf16_pair, device):
    for pair, precision in ((fp32_pair, "fp32"), (bf16_pair, "bf16")):
        assert pair.precision == precision
        for model in (pair.specialist, pair.generalist):
            assert model.device.startswith(torch.device(device).type)


def test_greedy_sd_equals_llm_token_for_token_in_fp32(fp32_pair, device, prompts):
    # Two different models (every draft refused, rolled back, recovered) and one model twice (drafts from the
    # private prompt, some kept, bonuses).
    for pair, kept in ((fp32_pair, "none"), (tiny_pair(seed=0, generalist_seed=0, device=device), "some")):
        _, llm = _run(pair, prompts, "llm")
        _, sd = _run(pair, prompts, "sd")
        assert sd.token_ids == llm.token_ids and len(llm.token_ids) > 0
        assert sd.stats.rounds > 0
        assert (sd.stats.accepted == 0) if kept == "none" else (0 < sd.stats.accepted < sd.stats.drafted)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_runs_in_fp32(fp32_pair, prompts, method):
    tokens, finished = _run(fp32_pair, prompts, method)
    _check_output(tokens, finished)
    if METHOD_INFO[method].speculative or METHOD_INFO[method].cloud_drafts:
        _check_rounds(tokens, finished)


def test_the_edge_and_the_cloud_on_their_own_streams_change_no_token(fp32_pair, device, on_cuda, prompts):
    """The engine benchmark's one-GPU setting (models.loading.on_streams): the Edge's passes on one CUDA stream,
    the Cloud's (reading ahead, beside the Edge's prompt read) on another; on the CPU, no streams, the same split."""
    edge, cloud = (torch.cuda.Stream(device), torch.cuda.Stream(device)) if on_cuda else (None, None)
    split = on_streams(fp32_pair, edge, cloud)
    assert split.cloud_side().specialist is split.generic_specialist is not split.specialist
    plain, private = prompts
    for method in ("specsteer", "llm"):
        _, expected = _run(fp32_pair, prompts, method)
        config = DecodeConfig(method=method, max_new_tokens=MAX_NEW, draft_len=DRAFT_LEN)
        cloud_here = InProcessCloud(split, read_ahead="concurrent")
        _, streamed = collect(generate_ids(split, plain, private, config, cloud=cloud_here))
        assert streamed.token_ids == expected.token_ids


def test_a_repeated_request_reuses_its_prompts_on_the_device(device, prompts):
    pair = tiny_pair(seed=5, generalist_seed=6, device=device)
    plain, private = prompts
    _, first = _run(pair, prompts, "specsteer", alpha=0.3)
    _, repeat = _run(pair, prompts, "specsteer", alpha=0.3)
    assert first.stats.reused_tokens == {"generalist": 0, "specialist0": 0, "specialist+": 0}
    assert repeat.stats.reused_tokens == {
        "generalist": len(plain) - 1,
        "specialist0": len(plain) - 1,
        "specialist+": len(private) - 1,
    }
    assert repeat.token_ids == first.token_ids
    # rejected drafts were rolled back (cropped) on the device along the way
    assert first.stats.accepted < first.stats.drafted


@pytest.mark.parametrize("method", SPECULATIVE)
def test_every_speculative_method_keeps_the_protocol_in_bf16(bf16_pair, prompts, method):
    tokens, finished = _run(bf16_pair, prompts, method)
    assert finished.stats.precision == "bf16"
    _check_output(tokens, finished)
    _check_rounds(tokens, finished)
    if method in ("specsteer", "sd"):
        _check_chosen_from_verdicts(tokens, finished, steered=method == "specsteer")


def test_the_exact_target_variant_keeps_the_protocol_in_bf16(bf16_pair, prompts):
    tokens, finished = _run(bf16_pair, prompts, "specsteer", exact=True, sample=True, temperature=1.0, seed=3)
    _check_output(tokens, finished)
    _check_rounds(tokens, finished)


def _check_output(tokens, finished) -> None:
    assert 0 < len(finished.token_ids) <= MAX_NEW
    assert [token.id for token in tokens if token.emitted] == finished.token_ids
    assert finished.stats.new_tokens == len(finished.token_ids)
    assert finished.stats.stop_reason in ("eos", "length")


def _check_rounds(tokens, finished) -> None:
    """Each round kept at most what it drafted (at most k), and the round log adds up to the counts."""
    stats = finished.stats
    assert len(stats.round_log) == stats.rounds > 0
    for step in stats.round_log:
        assert 0 <= step.accepted <= step.drafted <= max(DRAFT_LEN, P3Params().draft_len)
        assert step.seconds >= step.edge_s + step.cloud_s + step.link_s - 1e-6
    assert sum(step.accepted for step in stats.round_log) == stats.accepted
    assert sum(step.drafted for step in stats.round_log) == stats.drafted
    for number, step in enumerate(stats.round_log, start=1):
        kinds = [token.kind for token in tokens if token.round == number]
        assert kinds.count("accepted") == step.accepted
        assert kinds.count("rejected") == step.drafted - step.accepted


def _check_chosen_from_verdicts(tokens, finished, steered: bool) -> None:
    """A recovered or bonus token is one of the candidates its round's verdict carried; without steering
    (sd, beta 0) it is the best of them."""
    verdicts = [m.payload for m in finished.transcript if m.direction == "downlink" and m.kind == "verdict"]
    chosen = [token for token in tokens if token.kind in ("recovered", "bonus")]
    assert chosen
    for token in chosen:
        verdict = verdicts[token.round - 1]
        assert token.id in verdict["ids"]
        if not steered and isinstance(verdict["values"], list):
            best = max(range(len(verdict["ids"])), key=lambda i: verdict["values"][i])
            assert token.id == verdict["ids"][best]
