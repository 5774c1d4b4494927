"""The Cloud's admission by memory on the tier's device: its budget is the memory where the caches live (the GPU's
free memory on CUDA, not the host's), and what a session reserves covers what its caches come to hold there."""

from __future__ import annotations

import torch

from specsteer.cloud import admission
from specsteer.cloud.limits import ServiceLimits, available_memory_bytes, default_memory_budget
from specsteer.cloud.service import CloudService
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.models.tiny import tiny_pair, tiny_tokenizer
from specsteer.protocol.wire import DRAFT_HEADROOM


def test_the_budget_reads_the_memory_of_the_generalists_device(device, on_cuda):
    pair = tiny_pair(dtype=torch.bfloat16, device=device)
    where = pair.generalist.device
    budget = default_memory_budget(0.5, where)
    if on_cuda:
        free, total = torch.cuda.mem_get_info(torch.device(where))
        assert budget <= admission.gpu_memory_budget(free, total, 0.5) + 2**20  # free memory moves a little
        assert budget <= free * 0.5
    else:
        assert where == "cpu"
        assert abs(budget - available_memory_bytes() * 0.5) <= 64 * 2**20  # the host's, as before
    assert budget > 0


def test_a_sessions_reservation_covers_its_caches_on_the_device(device):
    pair = tiny_pair(dtype=torch.bfloat16, device=device)
    plain = tiny_tokenizer().encode("Write about the sea.")
    private = tiny_tokenizer().encode("History: quiet mornings. Write about the sea.")
    service = CloudService(pair, ServiceLimits(memory_budget_bytes=2**30, idle_timeout_s=None))
    config = DecodeConfig(method="specsteer", max_new_tokens=24)
    _, finished = collect(generate_ids(pair, plain, private, config, cloud=_Endpoint(service)))
    capacity = len(plain) + config.max_new_tokens + DRAFT_HEADROOM
    reserved = pair.generalist.sequence_bytes(capacity) + pair.specialist.sequence_bytes(capacity)
    held = pair.generalist.prefix_cache.idle_bytes + pair.specialist.prefix_cache.idle_bytes
    edge_cache = pair.specialist.sequence_bytes(len(private) + config.max_new_tokens + DRAFT_HEADROOM)
    assert 0 < held <= reserved + edge_cache  # the Cloud's two streams within their reservation (+ the Edge's)
    assert finished.stats.new_tokens > 0


class _Endpoint:
    """The given service as an in-process Cloud (its limits, not InProcessCloud's)."""

    def __init__(self, service: CloudService) -> None:
        self.service = service

    def transport(self):
        from specsteer.cloud.in_process import LocalTransport

        return LocalTransport(self.service)
