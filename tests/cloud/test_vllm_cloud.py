"""The Cloud whose models live in vLLM (specsteer.cloud.vllm), against the in-process Cloud on a tiny pair.

One pair of vLLM servers (the Generalist and the generic Specialist of ``tiny-vllm-test``, fp32) is
started for the whole module from ``.venv-vllm`` (scripts/setup_vllm.sh). Without that environment the
module is skipped, unless ``SPECSTEER_REQUIRE_VLLM=1``, where its absence fails (CI that installed it).
The last test kills an engine; it runs last in this file on purpose.
"""

from __future__ import annotations

import json
import os
import struct

import pytest

from specsteer.cloud.in_process import LocalTransport
from specsteer.cloud.vllm import ENGINE_NAME, EngineSettings, VllmCloudService, launch_cloud, save_pair, vllm_available
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.models.tiny import VLLM_PAIRING_ID, shared_test_pair
from specsteer.protocol.link import CloudEngineFailed, CloudError, CloudRefused
from specsteer.protocol.wire import DRAFT_HEADROOM, Open, encode

_MISSING = vllm_available()
if _MISSING and os.environ.get("SPECSTEER_REQUIRE_VLLM") == "1":
    raise RuntimeError(f"SPECSTEER_REQUIRE_VLLM=1 but vLLM cannot run here: {_MISSING}")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=f"vLLM not installed: {_MISSING}")]

CANARY = "QUOKKA-canary-4417 purple kazoo"
BLOCK_SIZE = 32


@pytest.fixture(scope="module")
def pair():
    return shared_test_pair(VLLM_PAIRING_ID)


@pytest.fixture(scope="module")
def launched(pair, tmp_path_factory):
    """Both engines, started once (about two minutes on two cores), stopped by their process ids."""
    root = tmp_path_factory.mktemp("vllm")
    generalist_dir, specialist_dir = save_pair(pair, root / "models")
    settings = EngineSettings(
        dtype="float32", max_model_len=2048, block_size=BLOCK_SIZE, kv_cache_bytes=64 * 2**20, threads=1
    )
    cloud = launch_cloud(
        VLLM_PAIRING_ID, pair.vocab_size, generalist_dir, specialist_dir, settings, root / "logs", timeout_s=900
    )
    try:
        yield cloud
    finally:
        cloud.stop()


class Endpoint:
    """A CloudEndpoint over one service in this process (what generate's ``cloud=`` takes)."""

    def __init__(self, service):
        self.service = service

    def transport(self):
        return LocalTransport(self.service)


@pytest.fixture
def service(launched):
    return VllmCloudService(launched.pair)


def prompts(pair, text="Write about the weather and the sea."):
    plain = pair.tokenizer.encode(text)
    private = pair.tokenizer.encode(f"History: my secret phrase is {CANARY}. ") + plain
    return plain, private


# Where the engines' log-probabilities decide exactly what the in-process Cloud's rows decide: the
# greedy ratio test (temperature 1), the match test on the argmax, the greedy baseline, and sampling at
# temperature 1 (the ratio test's uniforms and the Edge's draws come from the same seeds).
EXACT_CONFIGS = [
    DecodeConfig(method="specsteer", max_new_tokens=32, alpha=0.5),
    DecodeConfig(method="specsteer", max_new_tokens=32, alpha=0.1, draft_len=6),
    DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.5, sample=True, temperature=1.0, seed=3),
    DecodeConfig(method="lightcosteer", max_new_tokens=16),
    DecodeConfig(method="sd", max_new_tokens=32),
    DecodeConfig(method="llm", max_new_tokens=24),
]


@pytest.mark.parametrize("config", EXACT_CONFIGS, ids=lambda c: f"{c.method}-{c.alpha}-{c.draft_len}-{c.sample}")
def test_the_vllm_cloud_gives_the_in_process_output(pair, service, config):
    plain, private = prompts(pair)
    pair.clear_prefix_caches()
    here_tokens, here = collect(generate_ids(pair, plain, private, config))
    there_tokens, there = collect(generate_ids(pair, plain, private, config, cloud=Endpoint(service)))
    assert there.token_ids == here.token_ids
    assert [(t.id, t.kind, t.round) for t in there_tokens] == [(t.id, t.kind, t.round) for t in here_tokens]
    assert (there.stats.rounds, there.stats.accepted, there.stats.drafted) == (
        here.stats.rounds,
        here.stats.accepted,
        here.stats.drafted,
    )
    assert there.stats.uplink_bytes == here.stats.uplink_bytes


def test_a_round_computes_about_k_plus_one_tokens_not_the_sequence(pair, service, launched):
    """The prefix cache holds: each of a round's k + 1 requests recomputes only what follows its last full
    cache block, so a round computes far fewer tokens than it sends."""
    plain, private = prompts(pair, "A long prompt about the weather and the sea, " * 6)
    config = DecodeConfig(method="specsteer", max_new_tokens=40, alpha=0.5, draft_len=4)
    before = launched.pair.stats()
    _tokens, finished = collect(generate_ids(pair, plain, private, config, cloud=Endpoint(service)))
    after = launched.pair.stats()
    rounds = after.rounds - before.rounds
    sent = after.prompt_tokens["generalist"] - before.prompt_tokens["generalist"]
    computed = after.computed_tokens["generalist"] - before.computed_tokens["generalist"]
    assert rounds == finished.stats.rounds > 3
    prefill = len(plain)  # the Open reads the prompt once
    per_round = (computed - prefill) / rounds
    k = config.draft_len
    # Each request recomputes at most a block's remainder plus the drafts before it.
    assert per_round <= (k + 1) * (BLOCK_SIZE + k)
    assert computed < sent / 3, (computed, sent)
    # The passes the Edge hears of carry the computed tokens, not the sequence lengths.
    generalist_steps = [s for s in finished.stats.trace if s.who == "generalist"]
    assert generalist_steps and max(s.size for s in generalist_steps[1:]) <= (k + 1) * (BLOCK_SIZE + k)


def test_the_canary_never_reaches_an_engine(pair, launched, service):
    """What the engines receive is the plain prompt and drafts: no id sequence of the private history."""
    received: list[list[int]] = []
    for engine in (launched.pair.generalist, launched.pair.specialist):
        post = engine._client.post

        def recording(path, *, json=None, _post=post, **kwargs):
            received.append(list(json["prompt"]))
            return _post(path, json=json, **kwargs)

        engine._client.post = recording
    try:
        plain, private = prompts(pair)
        config = DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.5)
        collect(generate_ids(pair, plain, private, config, cloud=Endpoint(service)))
    finally:
        for engine in (launched.pair.generalist, launched.pair.specialist):
            del engine._client.post
    canary_ids = pair.tokenizer.encode(CANARY)
    assert received
    needle = struct.pack(f"<{len(canary_ids)}I", *canary_ids)
    for prompt in received:
        assert needle not in struct.pack(f"<{len(prompt)}I", *prompt)
        assert prompt[: len(plain)] == plain  # every request starts from the plain prompt


def test_rules_a_vllm_cloud_cannot_run_are_refused_clearly(pair, service):
    plain, private = prompts(pair)
    for config, words in (
        (DecodeConfig(method="specsteer", exact=True, sample=True, max_new_tokens=8), "full logit rows"),
        (DecodeConfig(method="costeer", max_new_tokens=8), "full logit rows"),
        (DecodeConfig(method="specsteer", sample=True, temperature=0.7, max_new_tokens=8), "temperature 1"),
        (DecodeConfig(method="specsteer", downlink_top_k=0, max_new_tokens=8), "top_k"),
    ):
        with pytest.raises(CloudRefused, match=words):
            collect(generate_ids(pair, plain, private, config, cloud=Endpoint(service)))
    assert service.info().runtime == ENGINE_NAME


def test_admission_counts_the_engines_kv_cache(pair, launched):
    from dataclasses import replace

    from specsteer.cloud.limits import ServiceLimits

    plain, _private = prompts(pair)
    service = VllmCloudService(launched.pair)
    message = Open(bytes(16), "ratio", tuple(plain), 100)
    needed = service.session_bytes(message)
    assert needed == (len(plain) + 100 + DRAFT_HEADROOM) * launched.pair.kv_bytes_per_token > 0
    tight = VllmCloudService(launched.pair, replace(ServiceLimits(), memory_budget_bytes=needed))

    tight.handle(encode(message))
    with pytest.raises(Exception, match="more than is left"):
        tight.handle(encode(Open(bytes([1]) * 16, "ratio", tuple(plain), 100)))
    tight.close_all()


def test_the_cloud_command_serves_edges_through_running_engines(pair, launched, tmp_path):
    """``python -m specsteer cloud --engine vllm`` over the module's engines (by URL), and an Edge over HTTP."""
    from specsteer.cloud.client import RemoteCloud
    from specsteer.cloud.process import start_cloud_process

    generalist = next(p for p in launched.processes if p.role == "generalist")
    specialist = next(p for p in launched.processes if p.role == "generic specialist")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    with open(tmp_path / "cloud.log", "wb") as log:
        child = start_cloud_process(
            "--pairing",
            VLLM_PAIRING_ID,
            "--engine",
            "vllm",
            "--vllm-generalist-url",
            generalist.url,
            "--vllm-specialist-url",
            specialist.url,
            env=env,
            stderr=log,
            ready_timeout_s=300,
        )
        try:
            with RemoteCloud(child.url) as remote:
                assert remote.info().runtime == ENGINE_NAME
                plain, private = prompts(pair)
                config = DecodeConfig(method="specsteer", max_new_tokens=24, alpha=0.5)
                pair.clear_prefix_caches()
                _tokens, here = collect(generate_ids(pair, plain, private, config))
                _tokens, there = collect(generate_ids(pair, plain, private, config, cloud=remote))
            assert there.token_ids == here.token_ids
            assert there.stats.cloud_runtime == ENGINE_NAME  # the Edge's stats name the engine
        finally:
            child.stop(timeout_s=60)
    assert "engines computed" in (tmp_path / "cloud.log").read_text()


def test_a_killed_engine_gives_the_edge_a_clear_error(pair, launched, service):
    """Runs last: it kills the generic Specialist's engine for good."""
    plain, private = prompts(pair)
    config = DecodeConfig(method="specsteer", max_new_tokens=16, alpha=0.5)
    specialist = next(p for p in launched.processes if p.role == "generic specialist")
    specialist.stop(timeout_s=30)
    with pytest.raises(CloudError) as raised:
        collect(generate_ids(pair, plain, private, config, cloud=Endpoint(service)))
    error = raised.value
    assert isinstance(error, CloudEngineFailed) and error.code == "engine-unavailable"
    assert "vLLM engine for the generic specialist" in str(error)
    assert json.dumps(str(error))  # a plain message the Edge can show
