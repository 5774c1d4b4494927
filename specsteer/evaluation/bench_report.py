"""What ``specsteer bench speed`` reports of its cases (``specsteer.evaluation.bench_plan``): each case's totals
over every prompt, its row, the rows auto picked, and the tables printed.

For the speculative methods a row carries the bound of DESIGN §6, computed from this run's own measured step times
and acceptance:

    E = (1 - a^(k+1)) / (1 - a)          tokens per round (bonus token included)
    T = k t_S + t_L(k+1) + t_S0(k+1)      seconds per round
    bound = E / T                          tokens per second

and two measures of where the rest goes: the same bound with T charged for the Specialist
steps each round really took (``device_bound``: SpecSteer's steered bonus token needs one
more), and the model-forward seconds per wall-clock second (``forward_share``; below 1 the rest is
Python, sampling, the wire format; it can pass 1, up to 2, where the in-process Cloud reads its prompts in
its own thread while the Edge reads or drafts: ``read_ahead``).

A generation whose timing was disturbed (the process stood still mid-generation: ``specsteer.method.timing``)
is left out of its row's speeds and step times (so of the bound's times), and counted in the row's
``left_out``; its drafts and acceptance still count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specsteer.engine.decode_config import DecodeConfig
from specsteer.evaluation.bench_plan import BenchCase, draft_label
from specsteer.evaluation.timing import left_out_sentence
from specsteer.method.catalog import METHOD_INFO, SPEED_REFERENCE
from specsteer.method.costs import speculative_bound
from specsteer.method.events import EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM
from specsteer.models.runtime_plan import PLAN_KEY, RuntimePlan, plan_record


@dataclass
class Tally:
    """Totals of one case over every prompt."""

    case: BenchCase
    runtime: str = ""
    tokens: int = 0
    seconds: float = 0.0
    ttft_seconds: list[float] = field(default_factory=list)
    first_visible_seconds: list[float] = field(default_factory=list)
    prefill_seconds: float = 0.0
    forward_seconds: float = 0.0
    device_steps: int = 0  # Specialist passes after its prefill
    drafted: int = 0
    accepted: int = 0
    verified: int = 0
    rounds: int = 0
    uplink_bytes: int = 0
    downlink_bytes: int = 0
    step_seconds: dict[str, list[float]] = field(default_factory=dict)
    left_out: int = 0  # generations whose timing was disturbed: counted, not timed

    def add(self, stats) -> None:
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        self.verified += stats.verified
        self.rounds += stats.rounds
        self.device_steps += max(stats.forward_calls.get(EDGE_STREAM, 0) - 1, 0)
        self.uplink_bytes += stats.uplink_bytes
        self.downlink_bytes += stats.downlink_bytes
        if stats.timing_disturbed:
            self.left_out += 1
            return
        if stats.ttft_s is not None:
            self.ttft_seconds.append(stats.ttft_s)
        if stats.first_visible_s is not None:
            self.first_visible_seconds.append(stats.first_visible_s)
        self.tokens += stats.new_tokens
        self.seconds += stats.seconds
        self.prefill_seconds += stats.prefill_seconds
        self.forward_seconds += sum(stats.forward_seconds.values())
        for name, seconds in stats.step_seconds.items():
            self.step_seconds.setdefault(name, []).append(seconds)

    @property
    def config(self) -> DecodeConfig:
        return self.case.config

    @property
    def tok_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def decode_tok_per_s(self) -> float:
        """Tokens per second of the decoding phase: prompt processing (every stream's prefill) left out."""
        seconds = self.seconds - self.prefill_seconds
        return self.tokens / seconds if seconds > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    def mean_step(self, name: str) -> float:
        values = self.step_seconds.get(name, [])
        return sum(values) / len(values) if values else 0.0

    @property
    def token_acceptance(self) -> float | None:
        """Per-token acceptance probability, the ``a`` of the bound: accepted / verified."""
        return self.accepted / self.verified if self.verified else None

    def bound(self, charge_device_steps: bool = False) -> float | None:
        """DESIGN §6 bound from this configuration's own acceptance and step times.

        With an adaptive draft length, k is the mean draft length of its rounds.
        ``charge_device_steps``: T counts the Specialist steps per round that were really run.
        """
        acceptance = self.token_acceptance  # None before any draft was verified
        if not METHOD_INFO[self.config.method].speculative or acceptance is None or not self.step_seconds:
            return None  # (no step times: every generation's timing was disturbed)
        k = self.drafted / self.rounds
        steps = self.device_steps / self.rounds if charge_device_steps else None
        return speculative_bound(
            acceptance,
            k,
            self.mean_step(EDGE_STREAM),
            self.mean_step(GENERALIST_STREAM),
            self.mean_step(GENERIC_STREAM),
            steps,
        )

    @property
    def ttft_s(self) -> float | None:
        """Mean time to the first token (prompt processing included)."""
        return sum(self.ttft_seconds) / len(self.ttft_seconds) if self.ttft_seconds else None

    @property
    def first_visible_s(self) -> float | None:
        """Mean time to the first token on screen (a pending draft, or a single model's first token)."""
        seen = self.first_visible_seconds
        return sum(seen) / len(seen) if seen else None

    @property
    def forward_share(self) -> float | None:
        return self.forward_seconds / self.seconds if self.seconds else None


def speed_rows(tallies: list[Tally]) -> list[dict]:
    """One row per case: its speeds, speedups over ``llm`` of the same tallies, acceptance, bounds and traffic."""
    reference = next((t for t in tallies if t.config.method == SPEED_REFERENCE), None)
    llm = reference.tok_per_s if reference else None
    llm_decode = reference.decode_tok_per_s if reference else None

    def speedup(tps: float) -> float | None:
        return tps / llm if llm else None

    rows = []
    for tally in tallies:
        info = METHOD_INFO[tally.config.method]
        bound = tally.bound()
        device_bound = tally.bound(charge_device_steps=True)
        rows.append(
            {
                "method": tally.case.name,
                "runtime": tally.runtime,
                "alpha": tally.config.alpha if info.takes_alpha else None,
                "beta": tally.config.beta if info.takes_beta else None,
                "cda_lambda": tally.config.cda_lambda,
                "tok_per_s": tally.tok_per_s,
                "speedup": speedup(tally.tok_per_s),
                "ttft_s": tally.ttft_s,
                "first_visible_s": tally.first_visible_s,
                "acceptance": tally.acceptance,
                "token_acceptance": tally.token_acceptance,
                "bound_tok_per_s": bound,
                "bound_fraction": tally.tok_per_s / bound if bound else None,
                "decode_tok_per_s": tally.decode_tok_per_s,
                # Where prompt reading dominates a short generation, end-to-end speedup hides how fast a
                # method decodes; this is decode tok/s over llm's on the same runtime.
                "decode_speedup": tally.decode_tok_per_s / llm_decode if llm_decode else None,
                "decode_bound_fraction": tally.decode_tok_per_s / bound if bound else None,
                "bound_speedup": speedup(bound) if bound else None,
                "device_bound_tok_per_s": device_bound,
                "decode_device_bound_fraction": tally.decode_tok_per_s / device_bound if device_bound else None,
                "forward_share": tally.forward_share,
                "draft_len": draft_label(tally.config) if info.speculative else None,
                "mean_draft_len": tally.drafted / tally.rounds if tally.rounds and info.speculative else None,
                "rounds": tally.rounds,
                "tokens": tally.tokens,  # of the timed generations
                "left_out": tally.left_out,
                "uplink_bytes": tally.uplink_bytes,
                "downlink_bytes": tally.downlink_bytes,
                "step_ms": {name: 1000 * tally.mean_step(name) for name in tally.step_seconds},
            }
        )
    return rows


def auto_rows(rows: list[dict], picks: dict[str, str], plans: Mapping[str, RuntimePlan] | None = None) -> list[dict]:
    """Rows labelled "auto": each a copy of the measured row of the runtime auto picked for its method, with
    the plan auto made for it (``runtime_plan``: each stream's runtime and the reasons) where ``plans`` has it."""
    plans = plans or {}
    return [
        {
            **row,
            "runtime": "auto",
            "auto_picked": row["runtime"],
            **({PLAN_KEY: plan_record(plans[row["method"]])} if row["method"] in plans else {}),
        }
        for row in rows
        if picks.get(row["method"]) == row["runtime"]
    ]


def format_table(result: dict) -> str:
    """The human-readable report: ``of bound`` end to end, ``decode/bound`` without prompt processing,
    ``decode/steps-bound`` against the bound charged for the device steps really taken."""
    columns = [
        ("tok/s", "tok_per_s", "{:7.2f}"),
        ("vs llm", "speedup", "{:6.2f}x"),
        ("visible s", "first_visible_s", "{:6.2f}"),
        ("ttft s", "ttft_s", "{:6.2f}"),
        ("decode vs llm", "decode_speedup", "{:12.2f}x"),
        ("accept", "acceptance", "{:7.0%}"),
        ("bound", "bound_tok_per_s", "{:7.2f}"),
        ("of bound", "bound_fraction", "{:8.0%}"),
        ("decode/bound", "decode_bound_fraction", "{:12.0%}"),
        ("decode/steps-bound", "decode_device_bound_fraction", "{:18.0%}"),
        ("in forward", "forward_share", "{:10.0%}"),
    ]
    widths = [max(len(title), 7) for title, _, _ in columns]
    several = isinstance(result.get("read_ahead"), list)  # each row names its read-ahead policy
    name_width = 44 if several else 24
    lines = [
        f"machine: {result['machine']['cpu']}; flags {' '.join(result['machine']['flags']) or '-'}; "
        f"{result['threads']} threads",
        f"{'runtime':12s} {'method':{name_width}s} "
        + " ".join(f"{title:>{w}s}" for (title, _, _), w in zip(columns, widths)),
    ]
    rows = list(result["rows"])
    if "reference" in result:
        rows.append(dict(result["reference"]))
    for row in rows:
        name = row["method"] + "".join(
            f" {short}={row[key]:g}"
            for key, short in (("alpha", "a"), ("beta", "b"), ("cda_lambda", "cda"))
            if row.get(key) is not None
        )
        name += f" k={row['draft_len']}" if row.get("draft_len") else ""
        name += f" {row['read_ahead']}" if several and row.get("read_ahead") else ""
        cells = [
            fmt.format(row[key]).rjust(w) if row.get(key) is not None else "-".rjust(w)
            for (_, key, fmt), w in zip(columns, widths)
        ]
        runtime = f"auto→{row['auto_picked']}" if row.get("auto_picked") else row.get("runtime", "")
        lines.append(f"{runtime:12s} {name:{name_width}s} " + " ".join(cells))
    left_out = sum(row.get("left_out") or 0 for row in result["rows"])
    if left_out:
        lines.append(left_out_sentence(left_out, noun="generation"))
    for runtime, reuse in result.get("prefix_reuse", {}).items():
        lines.append(
            f"prefix reuse [{runtime}] {reuse['method']}: first token {reuse['cold_ttft_s']:.2f} s, "
            f"repeated request {reuse['repeat_ttft_s']:.2f} s ({reuse['ratio']:.0%})"
        )
    return "\n".join(lines)


def format_rows(rows: list[dict]) -> str:
    """The rows of ``link`` and ``project`` as a table."""
    lines = [
        f"{'method':22s} {'rtt ms':>7s} {'measured':>9s} {'projected':>9s} {'error':>7s} {'rounds':>7s} "
        f"{'up B':>8s} {'down B':>9s}"
    ]
    for row in rows:
        name = row["method"] + "".join(
            f" {short}={row[key]:g}" for key, short in (("alpha", "a"), ("beta", "b")) if row.get(key) is not None
        )
        error = row.get("projection_error")
        lines.append(
            f"{name:22s} {row['rtt_ms']:7.0f} {row['measured_tok_per_s']:9.2f} "
            f"{row['projected_tok_per_s']:9.2f} {'' if error is None else f'{error:+.1%}':>7s} "
            f"{row['rounds']:7d} {row['uplink_bytes']:8d} {row['downlink_bytes']:9d}"
        )
    return "\n".join(lines)
