"""The Cloud's side of P³ (the ``cloud-draft`` rule): it drafts k tokens per Draft, takes its refused drafts
back, and refuses what the rule does not allow with a 400 that leaves the session usable."""

from __future__ import annotations

import pytest
import torch

from specsteer.cloud.limits import ServiceLimits
from specsteer.cloud.refusals import ServiceError
from specsteer.cloud.service import CloudService
from specsteer.protocol.wire import Draft, Open, Tokens, decode, encode

SESSION = (1).to_bytes(16, "little")
PROMPT = (1, 2, 3, 4)


def _greedy(pair, ids: list[int], count: int) -> list[int]:
    out: list[int] = []
    with torch.no_grad():
        for _ in range(count):
            logits = pair.generalist.model(torch.tensor([ids + out])).logits[0, -1, : pair.vocab_size]
            out.append(int(logits.argmax()))
    return out


def _round(service: CloudService, append=(), draft=()) -> tuple[int, ...]:
    (frame,) = service.handle(encode(Draft(SESSION, draft, append=append))).frames
    answer = decode(frame)
    assert isinstance(answer, Tokens)
    return answer.ids


def _refused(service: CloudService, frame: bytes) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        service.handle(frame)
    assert caught.value.status == 400
    return caught.value


def test_the_cloud_drafts_from_what_the_edge_kept_and_corrected(pair):
    pair.clear_prefix_caches()
    service = CloudService(pair)
    service.handle(encode(Open(SESSION, "cloud-draft", PROMPT, 32, top_k=3, stop_ids=())))
    first = _round(service)
    assert list(first) == _greedy(pair, list(PROMPT), 3)
    # The Edge kept the first draft and corrected the second: the Cloud drafts on from that text.
    correction = (first[1] + 1) % pair.vocab_size
    kept = [first[0], correction]
    second = _round(service, append=tuple(kept))
    assert list(second) == _greedy(pair, [*PROMPT, *kept], 3)
    # All three kept: it drafts on after them.
    third = _round(service, append=second)
    assert list(third) == _greedy(pair, [*PROMPT, *kept, *second], 3)
    service.close(SESSION)


def test_what_the_rule_does_not_allow_is_refused(pair):
    service = CloudService(pair, limits=ServiceLimits(max_draft_len=4))
    for top_k in (0, 5):
        problem = _refused(service, encode(Open(SESSION, "cloud-draft", PROMPT, 16, top_k=top_k)))
        assert "draft" in str(problem)
    service.handle(encode(Open(SESSION, "cloud-draft", PROMPT, 16, top_k=4)))
    assert "the Cloud drafts" in str(_refused(service, encode(Draft(SESSION, (5, 6)))))
    assert len(_round(service)) == 4  # the session is still usable
    service.close(SESSION)
