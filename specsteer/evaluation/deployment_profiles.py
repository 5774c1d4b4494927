"""The bundled deployment profiles: published speeds of a phone, a laptop, a cloud GPU and networks, each
number with its source.

Every number below is a published measurement, a value derived from one (the derivation is in its source
text), or marked "assumed" with the reason. :func:`get_profile` names them; the replay that uses them is
``specsteer.evaluation.deployment``.
"""

from __future__ import annotations

from typing import NamedTuple

from specsteer.evaluation.deployment import DeploymentProfile, HostOverhead, Source, StreamCost
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


# --------------------------------------------------------------------------- host overhead
#
# The engine's host work outside the model passes, Edge and Cloud apart, measured on this project's CPU by
# benchmarks/host_overhead.py (thread CPU time: the machine's other load is not counted), in two settings:
# tiny models with the real output width, whose passes leave the cores to the host work as a GPU's would, and
# the real offline pair on llama.cpp, whose passes compute on the same cores, as a phone's CPU does. The fits
# are copied here so that the package needs no file outside it; a test checks them against the JSON files, so
# they cannot drift from the measurements.


class HostMeasurement(NamedTuple):
    """One run of benchmarks/host_overhead.py: each side's fitted overhead, its file, command and setting."""

    edge: HostOverhead
    cloud: HostOverhead
    file: str
    command: str
    setting: str


HOST_OVERHEAD_MACHINE = "AMD EPYC (AVX2, FMA, F16C; no AVX-512), 2 cores shared with other work, torch on 1 thread"
PASSES_OFF_THE_CORES = HostMeasurement(
    edge=HostOverhead(per_row_s=0.0005623, per_message_s=0.0002178),
    cloud=HostOverhead(per_row_s=0.0003205, per_message_s=0.0002857),
    file="benchmarks/results/host_overhead.json",
    command="python benchmarks/host_overhead.py --tokens 64 --repeats 5 --out benchmarks/results/host_overhead.json",
    setting="tiny random models with the real 151,936-row output, whose passes leave the cores to the host work "
    "as passes on a GPU do",
)
PASSES_ON_THE_CORES = HostMeasurement(
    edge=HostOverhead(per_row_s=0.0011153, per_message_s=0.0003603),
    cloud=HostOverhead(per_row_s=0.0010755, per_message_s=0.0002647),
    file="benchmarks/results/host_overhead_offline_pair.json",
    command="python benchmarks/host_overhead.py --pairing offline-qwen2.5-coder --runtime llama.cpp --tokens 48 "
    "--repeats 3 --methods specsteer,sd,lightcosteer,llm,slm+",
    setting="the offline pair (Qwen2.5-Coder 0.5B / 1.5B Q4_K_M) on llama.cpp, whose passes compute on the same "
    "cores as the host work, as a phone's CPU does",
)

# On a GPU every pass also waits for the device and copies its logits rows to the host (one transfer per
# pass), which a CPU cannot measure. The engine benchmark's per-round split on a GPU (benchmarks/engine_bench.py)
# is its source: once it has run, set this to (the extra host time per row and per message it measured, the
# JSON's path), and every side whose passes run on a GPU adds it. Until then those sides charge the CPU
# measurement alone.
GPU_PASS_SYNC: tuple[HostOverhead, str] | None = None


def _host(side: str, on_gpu: bool, note: str) -> tuple[HostOverhead, tuple[Source, Source]]:
    """A side's host overhead and the sources of its two numbers: measured with passes that leave the cores free
    where the side's passes run on a GPU (plus the GPU's per-pass synchronisation once measured), with passes on
    the same cores where they run on the CPU."""
    measurement = PASSES_OFF_THE_CORES if on_gpu else PASSES_ON_THE_CORES
    measured = measurement.edge if side == "edge" else measurement.cloud
    overhead = measured
    if not on_gpu:
        gpu = ""
    elif GPU_PASS_SYNC is None:
        gpu = (
            " Its passes run on a GPU, whose synchronisation and logits copy per pass are not included: not "
            "measured yet (deployment_profiles.GPU_PASS_SYNC takes the engine benchmark's GPU split)."
        )
    else:
        sync, sync_source = GPU_PASS_SYNC
        overhead = measured.plus(sync)
        gpu = f" Plus the GPU's synchronisation and logits copy: {sync_source}."
    head = (
        f"measured on {HOST_OVERHEAD_MACHINE} with {measurement.setting}: the {side.capitalize()}'s host work "
        f"outside the model passes, a least-squares fit over specsteer, sd, lightcosteer, llm and slm+ generations "
        f"({measurement.file}, `{measurement.command}`)"
    )
    return overhead, (
        Source(f"{side}_host.per_row_s", f"{head}: {measured.per_row_s * 1e3:.3f} ms per logits row. {note}{gpu}"),
        Source(f"{side}_host.per_message_s", f"{head}: {measured.per_message_s * 1e3:.3f} ms per message sent.{gpu}"),
    )


UNSCALED_EDGE = (
    "Not scaled to the device: no measured ratio between this server core and the device's for this "
    "work, and the device runs the same loop, sampling and frames whatever computes its passes."
)
CLOUD_SERVER = "The Cloud's host is a server CPU like this one."
CLOUD_ONE_AFTER_OTHER = (
    "assumed: one GPU serving both Cloud models runs their passes one after the other "
    "(the conservative choice; the generic Specialist's pass is short either way)"
)


def _phone_4g() -> DeploymentProfile:
    link = LinkConditions(rtt_ms=(44.1 + 66.4) / 2, uplink_kbps=6300, downlink_kbps=21300, overhead_bytes=80)
    edge_host, edge_sources = _host("edge", on_gpu=False, note=UNSCALED_EDGE)
    cloud_host, cloud_sources = _host("cloud", on_gpu=True, note=CLOUD_SERVER)
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
            *edge_sources,
            *cloud_sources,
        ),
        edge_host=edge_host,
        cloud_host=cloud_host,
    )


def _laptop_wifi() -> DeploymentProfile:
    laptop_prompt_rate = 2000.0
    link = LinkConditions(rtt_ms=14.0, uplink_kbps=21600, downlink_kbps=153800, overhead_bytes=80)
    edge_host, edge_sources = _host("edge", on_gpu=True, note=UNSCALED_EDGE)
    cloud_host, cloud_sources = _host("cloud", on_gpu=True, note=CLOUD_SERVER)
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
            *edge_sources,
            *cloud_sources,
        ),
        edge_host=edge_host,
        cloud_host=cloud_host,
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
    both_on_server = "Both sides run on the one server, its host a server CPU like this one."
    edge_host, edge_sources = _host("edge", on_gpu=True, note=both_on_server)
    cloud_host, cloud_sources = _host("cloud", on_gpu=True, note=both_on_server)
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
            *edge_sources,
            *cloud_sources,
        ),
        edge_host=edge_host,
        cloud_host=cloud_host,
    )


PROFILES: dict[str, DeploymentProfile] = {p.name: p for p in (_phone_4g(), _laptop_wifi(), _paper())}


def get_profile(name: str) -> DeploymentProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown deployment profile {name!r}; choose one of {', '.join(PROFILES)}") from None
