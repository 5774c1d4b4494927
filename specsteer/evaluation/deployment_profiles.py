"""The bundled deployment profiles: published speeds of a phone, a laptop, a cloud GPU and networks, each
number with its source.

Every number below is a published measurement, a value derived from one (the derivation is in its source
text), or marked "assumed" with the reason. :func:`get_profile` names them; the replay that uses them is
``specsteer.evaluation.deployment``.
"""

from __future__ import annotations

from specsteer.evaluation.deployment import DeploymentProfile, Source, StreamCost
from specsteer.protocol.emulation import LinkConditions

# The Qwen team's speed benchmark reports
# (prompt + 2048 generated tokens) / time at batch size 1 for prompts of 1 and 6144 tokens; with a
# one-token prompt that is the decode rate, and the extra time of the 6144-token run per prompt
# token bounds the prompt cost from above (that run also decodes at a longer context).

QWEN_SPEED_BENCHMARK = (
    "Qwen team's speed benchmark (Qwen3, SGLang 0.4.6, BF16, batch 1, NVIDIA H20 96GB), "
    "https://qwen.readthedocs.io/en/latest/getting_started/speed_benchmark.html"
)
EXECUTORCH_LLAMA = (
    "ExecuTorch Llama example, Llama 3.2 1B SpinQuant on a OnePlus 12 (Snapdragon 8 Gen 3 CPU, "
    "XNNPACK + KleidiAI, prompt of 64 tokens), "
    "https://github.com/pytorch/executorch/blob/main/examples/models/llama/README.md"
)
OPENSIGNAL_US_2019 = (
    "Opensignal, State of Mobile: USA, May 2019 (Q1 2019; 4G latency 44.1-66.4 ms across states, "
    "4G upload 6.3 Mbps, download 21.3 Mbps), "
    "https://www.telecomengine.com/article/opensignal-benchmarks-5g-readiness-with-new-usa-analysis/"
)
OOKLA_US_JUNE_2022 = (
    "Ookla Speedtest Global Index, United States fixed broadband, June 2022 (median download "
    "153.80 Mbps, upload 21.60 Mbps, latency 14 ms), "
    "https://www.telecompetitor.com/cox-nears-200-mbps-download-in-june-ookla-speedtest-results/"
)
EDGE_LAPTOP_PAPER = (
    "Tummalapalli et al., LLM Inference at the Edge: Mobile, NPU, and GPU Performance Efficiency "
    "Trade-offs Under Sustained Load, arXiv:2603.23640 (Qwen 2.5 1.5B 4-bit on a laptop RTX 4050 "
    "sustains 131.7 tok/s), https://arxiv.org/abs/2603.23640"
)
SPECSTEER_PAPER = "SpecSteer paper (arXiv:2603.16219), Table 4 and Appendix D"
WIRE_FRAMING = (
    "derived from the protocol headers of one small message in one segment: IPv4 20 B (RFC 791) + "
    "TCP 20 B + timestamps option 12 B (RFC 9293, RFC 7323) + TLS 1.3 record 22 B (RFC 8446) + "
    "masked WebSocket frame header 6 B (RFC 6455) = 80 B; assumed: WebSocket over TLS, ACKs not counted"
)


def _prompt_rate_from_qwen_table(speed_at_1: float, speed_at_6144: float) -> float:
    """Prompt tokens/s bounded from the Qwen benchmark's 1-token and 6144-token rows."""
    extra_seconds = (6144 + 2048) / speed_at_6144 - (1 + 2048) / speed_at_1
    return 6144 / extra_seconds


def _qwen_stream(speed_at_1: float, speed_at_6144: float) -> StreamCost:
    return StreamCost.from_rates(speed_at_1, _prompt_rate_from_qwen_table(speed_at_1, speed_at_6144))


def _qwen_source(model: str, speed_at_1: float, speed_at_6144: float) -> str:
    return (
        f"{QWEN_SPEED_BENCHMARK}: {model} {speed_at_1} tok/s at a 1-token prompt (decode step), "
        f"{speed_at_6144} tok/s at 6144 (prompt cost derived as above: "
        f"{_prompt_rate_from_qwen_table(speed_at_1, speed_at_6144):.0f} tok/s)"
    )


NO_HOST_OVERHEAD = (
    "assumed 0: host work outside the passes (sampling, the ratio test, serialization) is small "
    "next to these pass times; the measured profile of this machine includes it"
)
CLOUD_ONE_AFTER_OTHER = (
    "assumed: one GPU serving both Cloud models runs their passes one after the other "
    "(the conservative choice; the generic Specialist's pass is short either way)"
)


def _phone_4g() -> DeploymentProfile:
    link = LinkConditions(rtt_ms=(44.1 + 66.4) / 2, uplink_kbps=6300, downlink_kbps=21300, overhead_bytes=80)
    return DeploymentProfile(
        name="phone-4g",
        label="Phone SoC (1B-class Specialist) + Qwen3-32B on a datacentre GPU, over 4G",
        specialist=StreamCost.from_rates(decode_tok_per_s=50.2, prompt_tok_per_s=260.5),
        generalist=_qwen_stream(20.72, 77.82),
        generic_specialist=_qwen_stream(414.17, 1426.46),
        link=link,
        cloud_parallel=False,
        sources=(
            Source(
                "specialist.decode",
                f"{EXECUTORCH_LLAMA}: decode 50.2 tok/s; a further token in a pass at the "
                "prefill rate 260.5 tok/s. A 1B model stands in for the paper's 0.6B Specialist (a 0.6B model "
                "would step faster: conservative)",
            ),
            Source("specialist.prefill", f"{EXECUTORCH_LLAMA}: prefill 260.5 tok/s"),
            Source("generalist.decode", _qwen_source("Qwen3-32B", 20.72, 77.82)),
            Source("generalist.prefill", _qwen_source("Qwen3-32B", 20.72, 77.82)),
            Source("generic_specialist.decode", _qwen_source("Qwen3-0.6B", 414.17, 1426.46)),
            Source("generic_specialist.prefill", _qwen_source("Qwen3-0.6B", 414.17, 1426.46)),
            Source("link.rtt_ms", f"{OPENSIGNAL_US_2019}: the middle of the 44.1-66.4 ms range"),
            Source("link.uplink_kbps", f"{OPENSIGNAL_US_2019}: 4G upload 6.3 Mbps"),
            Source("link.downlink_kbps", f"{OPENSIGNAL_US_2019}: download 21.3 Mbps"),
            Source("link.overhead_bytes", WIRE_FRAMING),
            Source("cloud_parallel", CLOUD_ONE_AFTER_OTHER),
            Source("overhead_per_step_s", NO_HOST_OVERHEAD),
        ),
    )


def _laptop_wifi() -> DeploymentProfile:
    laptop_prompt_rate = 2000.0
    link = LinkConditions(rtt_ms=14.0, uplink_kbps=21600, downlink_kbps=153800, overhead_bytes=80)
    return DeploymentProfile(
        name="laptop-wifi",
        label="Laptop GPU (1.5B Specialist) + Qwen3-8B on a cloud GPU, over home Wi-Fi",
        specialist=StreamCost.from_rates(decode_tok_per_s=131.7, prompt_tok_per_s=laptop_prompt_rate),
        generalist=_qwen_stream(81.73, 296.25),
        generic_specialist=_qwen_stream(227.80, 838.28),
        link=link,
        cloud_parallel=False,
        sources=(
            Source(
                "specialist.decode",
                f"{EDGE_LAPTOP_PAPER}: 131.7 tok/s decode; a further token in a pass at the assumed prompt rate below",
            ),
            Source(
                "specialist.prefill",
                f"assumed {laptop_prompt_rate:.0f} tok/s: no published prompt rate was found "
                "for this laptop; the order of magnitude a laptop GPU reaches on a 1.5B 4-bit model (only the "
                "first pass of a generation and a draft's extra tokens use it)",
            ),
            Source("generalist.decode", _qwen_source("Qwen3-8B", 81.73, 296.25)),
            Source("generalist.prefill", _qwen_source("Qwen3-8B", 81.73, 296.25)),
            Source("generic_specialist.decode", _qwen_source("Qwen3-1.7B (nearest size to 1.5B)", 227.80, 838.28)),
            Source("generic_specialist.prefill", _qwen_source("Qwen3-1.7B (nearest size to 1.5B)", 227.80, 838.28)),
            Source(
                "link.rtt_ms",
                f"{OOKLA_US_JUNE_2022}: 14 ms median latency, measured to a nearby test server "
                "(a cloud region farther away adds to it: optimistic)",
            ),
            Source("link.uplink_kbps", f"{OOKLA_US_JUNE_2022}: median upload 21.60 Mbps"),
            Source("link.downlink_kbps", f"{OOKLA_US_JUNE_2022}: median download 153.80 Mbps"),
            Source("link.overhead_bytes", WIRE_FRAMING),
            Source("cloud_parallel", CLOUD_ONE_AFTER_OTHER),
            Source("overhead_per_step_s", NO_HOST_OVERHEAD),
        ),
    )


def _paper() -> DeploymentProfile:
    small = StreamCost.from_rates(
        decode_tok_per_s=58.57, prompt_tok_per_s=_prompt_rate_from_qwen_table(414.17, 1426.46)
    )
    small_source = (
        "derived: the paper gives no Specialist speed; Qwen's benchmark with Transformers (BF16, H20) "
        "reports Qwen3-0.6B at 58.57 tok/s, and with the paper's Vanilla LLM at 22.58 tok/s and its "
        "Cloud passes side by side that predicts LightCoSteer at 1/(1/22.58 + 1/58.57) = 16.3 tok/s "
        f"against the paper's 16.03 (Table 4). {QWEN_SPEED_BENCHMARK}"
    )
    prompt_source = (
        "assumed: the paper gives no prompt rates; taken from the SGLang rows of the Qwen benchmark "
        f"(derived as above). {QWEN_SPEED_BENCHMARK}"
    )
    return DeploymentProfile(
        name="paper",
        label="The paper's setting: Qwen3-0.6B / Qwen3-32B side by side, no network",
        specialist=small,
        generalist=StreamCost.from_rates(
            decode_tok_per_s=22.58, prompt_tok_per_s=_prompt_rate_from_qwen_table(20.72, 77.82)
        ),
        generic_specialist=small,
        link=LinkConditions(rtt_ms=0.0, overhead_bytes=0),
        cloud_parallel=True,
        sources=(
            Source("specialist.decode", small_source),
            Source("specialist.prefill", prompt_source),
            Source(
                "generalist.decode",
                f"{SPECSTEER_PAPER}: Vanilla LLM (Qwen3-32B) 22.58 tok/s; a further token "
                f"in a pass at the prompt rate below",
            ),
            Source("generalist.prefill", prompt_source),
            Source("generic_specialist.decode", small_source),
            Source("generic_specialist.prefill", prompt_source),
            Source(
                "link.rtt_ms",
                "assumed 0: the paper reports no network conditions; its speeds read as "
                "measured with both sides on one server",
            ),
            Source("link.uplink_kbps", "assumed unlimited (no network, as above)"),
            Source("link.downlink_kbps", "assumed unlimited (no network, as above)"),
            Source("link.overhead_bytes", "assumed 0 (no network, as above)"),
            Source("cloud_parallel", f"{SPECSTEER_PAPER}: D.2 'the Cloud runs p_L and p_S0 in parallel'"),
            Source("overhead_per_step_s", NO_HOST_OVERHEAD),
        ),
    )


PROFILES: dict[str, DeploymentProfile] = {p.name: p for p in (_phone_4g(), _laptop_wifi(), _paper())}


def get_profile(name: str) -> DeploymentProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown deployment profile {name!r}; choose one of {', '.join(PROFILES)}") from None
