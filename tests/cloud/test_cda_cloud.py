"""CDA at the Cloud's seam: a session's Open names it, the Cloud applies it where it can, and refuses clearly where
it cannot (a rule with no α, a cross-tokenizer pair, a Cloud whose rounds a measurement scripts); an Edge facing a
Cloud that does not offer it (an older one, a vLLM one) is told before any session opens."""

from __future__ import annotations

import pytest

from specsteer.cloud.in_process import InProcessCloud, LocalTransport
from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.service import CloudService
from specsteer.engine.decode_config import DecodeConfig, cross_tokenizer_problem
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.acceptance import ScriptedRate
from specsteer.models.tiny import tiny_cross_pair, tiny_pair
from specsteer.protocol.cloud_reports import CloudInfo
from specsteer.protocol.link import CloudRefused
from specsteer.protocol.wire import CrossOpen, Draft, Open, Verdict, decode, encode

SESSION = bytes(range(16))
PLAIN, PRIVATE = [1, 2, 3, 4], [9, 8, 1, 2, 3, 4]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, generalist_seed=1)


def _refusal(service: CloudService, message: Open) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        service.handle(encode(message))
    assert caught.value.status == 400 and service.open_sessions == 0
    return caught.value


def test_a_cloud_says_it_offers_cda_and_applies_it_to_the_session_that_asks(pair):
    service = CloudService(pair)
    assert service.info().acceptance == ("fixed", "cda")
    # After this prompt the pair's two rows diverge (JSD ≈ 0.56 nats) and draft 5's ratio p_L / p_S0 is ≈ 0.39:
    # refused at α = 0.5, kept at CDA's 0.5·exp(−0.56) ≈ 0.28. Same rows, two sessions, two verdicts.
    kept = {}
    for n, strength in enumerate((None, 1.0)):
        session = bytes([n]) * 16
        service.handle(encode(Open(session, "ratio", PLAIN, 8, alpha=0.5, cda_lambda=strength)))
        (frame,) = service.handle(encode(Draft(session, (5,)))).frames
        verdict = decode(frame)
        assert isinstance(verdict, Verdict)
        kept[strength] = verdict.accepted
    assert kept == {None: 0, 1.0: 1}


def test_the_longest_legal_open_fits_the_frame_limit_with_its_acceptance_rule(pair):
    limits = ServiceLimits(max_prompt_tokens=16, max_stop_ids=2)
    service = CloudService(pair, limits)
    longest = Open(SESSION, "ratio", tuple(range(1, 17)), 8, stop_ids=(1, 2), cda_lambda=1.0)
    assert len(encode(longest)) == limits.max_frame_bytes
    service.handle(encode(longest))  # admitted, not "too large"
    assert service.open_sessions == 1


@pytest.mark.parametrize("rule", ["exact", "match", "costeer", "generate", "cloud-draft"])
def test_cda_with_a_rule_that_has_no_alpha_is_refused(pair, rule):
    error = _refusal(CloudService(pair), Open(SESSION, rule, PLAIN, 8, top_k=4, cda_lambda=1.0))
    assert "has none to adapt" in str(error) and rule in str(error)


def test_cda_with_a_bad_strength_is_refused(pair):
    for strength in (-1.0, float("inf"), float("nan")):
        assert "λ" in str(_refusal(CloudService(pair), Open(SESSION, "ratio", PLAIN, 8, cda_lambda=strength)))


def test_a_measurements_cloud_keeps_its_scripted_rounds_and_refuses_cda(pair):
    service = CloudService(pair, acceptance=ScriptedRate(0.5))
    assert service.info().acceptance == ("fixed",)
    error = _refusal(service, Open(SESSION, "ratio", PLAIN, 8, cda_lambda=1.0))
    assert "fixed α only" in str(error) and "scripted rate" in str(error)
    service.handle(encode(Open(SESSION, "ratio", PLAIN, 8)))  # the fixed α opens as ever


def test_a_cross_tokenizer_cloud_refuses_cda():
    cross = tiny_cross_pair()
    service = CloudService(cross)
    assert service.info().acceptance == ("fixed",)
    error = _refusal(service, CrossOpen(SESSION, "ratio", PLAIN, 8, cda_lambda=1.0, large_prompt=PLAIN))
    assert "two tokenizers" in str(error)
    problem = cross_tokenizer_problem(cross, DecodeConfig(cda_lambda=1.0))  # the Edge says so before it starts
    assert problem is not None and "CDA" in problem and cross_tokenizer_problem(cross, DecodeConfig()) is None


def test_an_older_clouds_description_reads_as_the_fixed_alpha_only(pair):
    described = CloudService(pair).info().to_json()
    assert described["acceptance"] == ["fixed", "cda"]
    del described["acceptance"]  # what a Cloud from before the acceptance rules says of itself
    assert CloudInfo.from_json(described).acceptance == ("fixed",)


def test_an_edge_asking_cda_of_a_cloud_without_it_is_told_before_opening(pair):
    opened = []

    class Older:
        """A Cloud whose description lists no CDA (an older one, or a vLLM one)."""

        def transport(self):
            service = CloudService(pair)
            original = service.handle

            def handle(frame, client=""):
                opened.append(frame)
                return original(frame, client)

            service.handle = handle
            service.info = lambda: CloudInfo(pair.pairing_id, pair.vocab_size)
            return LocalTransport(service)

    config = DecodeConfig(method="specsteer", cda_lambda=1.0, max_new_tokens=8)
    with pytest.raises(CloudRefused, match="not CDA") as caught:
        collect(generate_ids(pair, PLAIN, PRIVATE, config, cloud=Older()))
    assert caught.value.code == "acceptance" and not opened
    # The fixed α still runs against it.
    collect(generate_ids(pair, PLAIN, PRIVATE, DecodeConfig(method="specsteer", max_new_tokens=8), cloud=Older()))
    assert opened


def test_the_open_names_cda_only_for_the_ratio_rule(pair):
    """SpecSteer's session carries λ; the methods without α never send it (their configs refuse it anyway)."""
    seen: list[Open] = []

    class Watching:
        def transport(self):
            service = CloudService(pair)
            original = service.handle

            def handle(frame, client=""):
                message = decode(frame)
                if isinstance(message, Open):
                    seen.append(message)
                return original(frame, client)

            service.handle = handle
            return LocalTransport(service)

    _, finished = collect(
        generate_ids(pair, PLAIN, PRIVATE, DecodeConfig(cda_lambda=2.0, max_new_tokens=8), cloud=Watching())
    )
    assert [(m.rule.value, m.cda_lambda) for m in seen] == [("ratio", 2.0)]
    assert finished.stats.cda_lambda == 2.0
    collect(generate_ids(pair, PLAIN, PRIVATE, DecodeConfig(method="sd", max_new_tokens=8), cloud=Watching()))
    assert seen[-1].cda_lambda is None and InProcessCloud(pair).acceptance.label == "ratio test"
