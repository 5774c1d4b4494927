"""A generation's statistics name what verified it: the Cloud's own runtime as its /v1/info says ("vllm" for
``specsteer cloud --engine vllm``), not the Edge's. Tiny fp32 random pair, Clouds in this process."""

from __future__ import annotations

from dataclasses import replace

from specsteer.cloud.in_process import InProcessCloud
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids


class NamedCloud:
    """The in-process Cloud, describing itself with another runtime (as a vLLM Cloud's /v1/info does)."""

    def __init__(self, pair, runtime: str):
        self.cloud, self.runtime = InProcessCloud(pair), runtime

    def transport(self):
        transport = self.cloud.transport()
        described = replace(transport.info(), runtime=self.runtime)
        transport.info = lambda: described
        return transport


def stats_of(pair, method: str, cloud=None):
    plain = pair.tokenizer.encode("Write about the weather and the sea.")
    private = pair.tokenizer.encode("History: I love long walks. ") + plain
    _tokens, finished = collect(
        generate_ids(pair, plain, private, DecodeConfig(method=method, max_new_tokens=8), cloud=cloud)
    )
    return finished.stats


def test_the_stats_name_the_clouds_runtime_not_the_edges(pair):
    assert stats_of(pair, "specsteer").cloud_runtime == pair.runtime  # the in-process Cloud runs the pair's models
    named = stats_of(pair, "specsteer", NamedCloud(pair, "vllm"))
    assert named.cloud_runtime == "vllm"
    assert named.runtime == pair.runtime  # the Edge's own runtime is unchanged
    assert stats_of(pair, "llm", NamedCloud(pair, "vllm")).cloud_runtime == "vllm"


def test_a_generation_that_never_reaches_a_cloud_names_none(pair):
    assert stats_of(pair, "slm", NamedCloud(pair, "vllm")).cloud_runtime == ""
