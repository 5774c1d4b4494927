"""``python -m specsteer bench speed``: every method on the same prompts, in one run.

(``bench link`` and ``bench project``, the device-cloud system through a Cloud service and its
projection onto deployments, are described in ``specsteer.evaluation.bench_link`` and ``specsteer.evaluation.deployment``.)

Speeds are only comparable inside one run on this kind of shared machine, so
the benchmark reports ratios to ``llm`` measured in the same run on the same
runtime, interleaving methods (and runtimes, with ``--runtime llama.cpp,transformers``)
prompt by prompt so that drift in machine load hits them all alike. Every
generation starts with empty prefix caches, so no method is timed on a prompt
another one already read; a separate measurement reports what reuse saves
(``prefix_reuse``: the first token of a repeated request). The JSON records the
machine (CPU model and flags, threads, library versions): a speed figure holds
only for the machine it was measured on.

For the speculative methods it also reports the bound of DESIGN §6, computed
from this run's own measured step times and acceptance:

    E = (1 - a^(k+1)) / (1 - a)          tokens per round (bonus token included)
    T = k t_S + t_L(k+1) + t_S0(k+1)      seconds per round
    bound = E / T                          tokens per second

and two measures of where the rest goes: the same bound with T charged for the Specialist
steps each round really took (``device_bound``: SpecSteer's steered bonus token needs one
more), and the model-forward seconds per wall-clock second (``forward_share``; below 1 the rest is
Python, sampling, the wire format; it can pass 1, up to 2, where the in-process Cloud reads its prompts in
its own thread while the Edge reads or drafts: ``read_ahead``).

``read_ahead`` may name several policies (specsteer.cloud.read_ahead): each is then a case of the same run,
its rows carrying it (``read_ahead``), and speedups are against ``llm`` under the same policy.

A generation whose timing was disturbed (the process stood still mid-generation: ``specsteer.method.timing``)
is left out of its row's speeds and step times (so of the bound's times), and counted in the row's
``left_out``; its drafts and acceptance still count.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from specsteer.cloud.in_process import InProcessCloud
from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD, ReadAhead, read_ahead_mode
from specsteer.data.tasks import PromptPair
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Prepared, Request, chat_ids, prepare
from specsteer.evaluation.timing import left_out_sentence
from specsteer.method.catalog import METHOD_INFO, SPEED_REFERENCE, method_info
from specsteer.method.costs import speculative_bound
from specsteer.method.events import EDGE_STREAM, GENERALIST_STREAM, GENERIC_STREAM
from specsteer.method.p3 import P3Params
from specsteer.models.runtime_plan import PLAN_KEY, RuntimePlan, plan_record
from specsteer.protocol.wire import MAX_DRAFT_LEN
from specsteer.runtimes.base import TransformersModel
from specsteer.runtimes.machine import machine_info

if TYPE_CHECKING:
    from specsteer.models.pair import LoadedPair

DEFAULT_METHODS = "slm,slm+,llm,sd,sd-plain,lightcosteer,costeer,specsteer"
# The adaptive chooser picks k from the bound, so it gets the whole range: at the ~99 % per-token
# acceptance of SpecSteer α=0.1 the bound keeps rising past k=8 (measured: benchmarks/results/bench_cap.json).
MAX_AUTO_DRAFT = MAX_DRAFT_LEN


@dataclass(frozen=True)
class BenchCase:
    """One row of the benchmark: a decoding configuration, and whether the drafter sees the history.

    ``sd-plain`` (standard SD whose drafter reads the plain prompt) is the setting of transformers'
    assisted generation, which has no way to give the assistant another prompt: the engine-to-engine
    comparison. Plain ``sd`` is the paper's baseline, drafting with SLM+.
    """

    config: DecodeConfig
    drafter_history: bool = True

    @property
    def name(self) -> str:
        return self.config.method if self.drafter_history else f"{self.config.method}-plain"

    def prompts_for(self, prepared: Prepared) -> Prepared:
        if self.drafter_history:
            return prepared
        return Prepared(PromptPair(prepared.prompts.plain, prepared.prompts.plain), [])


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


def bench_cases(
    methods: list[str],
    alphas: list[float],
    draft_lens: list[str],
    max_new_tokens: int,
    p3: P3Params | None = None,
    acceptance: Sequence[float | None] = (None,),
) -> list[BenchCase]:
    """One case per method, per alpha and acceptance rule (specsteer: None the fixed α, a number CDA's λ) and per
    draft length (speculative methods).

    A method is an engine method or ``sd-plain``; a draft length is a number or ``auto``
    (adaptive, at most MAX_AUTO_DRAFT; ``auto:N`` at most N), optionally followed by ``@c``: stop
    drafting after a draft the Specialist gave less than probability c (``12@0.4``, ``auto:12@0.4``).
    ``p3``: P³'s settings (its own draft length and tau).
    """
    cases = []
    for name in methods:
        method = name.removesuffix("-plain")
        info = method_info(method)
        for alpha, rule in [(a, r) for r in acceptance for a in alphas] if info.takes_alpha else [(0.1, None)]:
            for draft_len in draft_lens if info.speculative else draft_lens[:1]:
                length, _, confidence = draft_len.partition("@")
                adaptive = length.startswith("auto")
                cap = length.removeprefix("auto").removeprefix(":") if adaptive else length
                config = DecodeConfig(
                    method=method,
                    alpha=alpha,
                    max_new_tokens=max_new_tokens,
                    draft_len=int(cap) if cap else MAX_AUTO_DRAFT,
                    adaptive_draft=adaptive,
                    draft_confidence=float(confidence or 0),
                    p3=p3 or P3Params(),
                    cda_lambda=rule,
                ).validate()
                cases.append(BenchCase(config, drafter_history=name == method))
    return cases


def load_prompts(count: int, data: str | None, task: str | None = None) -> list[Prepared]:
    """``count`` real LongLaMP records (review and writing alternately), prepared with BM25 top-3;
    with ``task="cogenesis"``, CoGenesis test records (or those of ``data``) with their profiles."""
    from specsteer.data.datasets import COGENESIS_TASK, load_records, load_task_records
    from specsteer.data.sources import bundled_sample_path, resolve_data_source, shared_data_path

    if task == COGENESIS_TASK:
        records = load_task_records(resolve_data_source(data or "shared", task), task, limit=count)
        return [
            prepare(Request(task=r.task, input_text=r.input, history=r.profile, profile=r.user_profile))
            for r in records
        ]
    shared = [data] if data else [shared_data_path("review"), shared_data_path("writing")]
    sources = [s for s in shared if s] or [bundled_sample_path("review"), bundled_sample_path("writing")]
    pools = [load_records(source) for source in sources]
    records = [pool[i] for i in range(max(map(len, pools))) for pool in pools if i < len(pool)][:count]
    return [prepare(Request(task=r.task, input_text=r.input, history=r.profile)) for r in records]


def run_speed(
    pairs: Sequence[LoadedPair],
    prompts: list[Prepared],
    cases: list[BenchCase],
    reference: bool = True,
    progress=lambda line: None,
    read_ahead: ReadAhead | bool | Sequence[ReadAhead | bool] = DEFAULT_READ_AHEAD,
) -> dict:
    """Every case on every pair (one pair per runtime), prompt by prompt; rows per (runtime, read-ahead,
    case).

    ``reference``: transformers' own assisted generation on each transformers pair, as a row of
    its own. Speedups are against ``llm`` on the same runtime and read-ahead. ``read_ahead``: when the
    in-process Cloud reads its prompts (specsteer.cloud.read_ahead; True: ``concurrent``, False: ``off``),
    or several such policies, each case run under each, one after the other, on the same prompt.
    """
    modes = _read_ahead_modes(read_ahead)
    for pair in pairs:
        _warm_up(pair, prompts[0], [case.config for case in cases])
    # A pair's label: its runtime, "+handoff" where the Specialist's long prompts are read by transformers.
    tallies = {
        (pair.runtime_label, mode): [Tally(case, pair.runtime_label) for case in cases]
        for pair in pairs
        for mode in modes
    }
    assisted = {
        pair.runtime: Tally(BenchCase(DecodeConfig(method="llm")), pair.runtime)
        for pair in pairs
        if reference and pair.runtime == "transformers"
    }
    max_new_tokens = cases[0].config.max_new_tokens
    for index, prepared in enumerate(prompts):
        for pair in pairs:
            # A case's read-ahead policies one after the other: drift in the machine's load hits them alike.
            for position in range(len(cases)):
                for mode in modes:
                    tally = tallies[(pair.runtime_label, mode)][position]
                    pair.clear_prefix_caches()  # no case is timed on a prompt another case already read
                    cloud = InProcessCloud(pair, read_ahead=mode)
                    _, finished = collect(generate(pair, tally.case.prompts_for(prepared), tally.config, cloud=cloud))
                    tally.add(finished.stats)
                    shown = f" read-ahead={mode}" if len(modes) > 1 else ""
                    progress(
                        f"prompt {index + 1}/{len(prompts)} [{pair.runtime_label}] {_label(tally.case)}{shown}: "
                        f"{finished.stats.tok_per_s:.2f} tok/s"
                        + (" (timing disturbed: left out of the speeds)" if finished.stats.timing_disturbed else "")
                    )
            if pair.runtime in assisted:
                tokens, seconds = transformers_assisted(pair, prepared, max_new_tokens)
                assisted[pair.runtime].tokens += tokens
                assisted[pair.runtime].seconds += seconds
                progress(
                    f"prompt {index + 1}/{len(prompts)} [{pair.runtime}] transformers-assisted: "
                    f"{tokens / seconds:.2f} tok/s"
                )
    rows = [
        {**row, "read_ahead": mode}
        for pair in pairs
        for mode in modes
        for row in _rows(tallies[(pair.runtime_label, mode)])
    ]
    result = {
        "rows": rows,
        "prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "runtimes": {pair.runtime_label: _runtime_info(pair) for pair in pairs},
        "machine": machine_info().to_dict(),
        "threads": torch.get_num_threads(),
        "read_ahead": modes if len(modes) > 1 else modes[0],
        # The fields of the single-runtime report, kept: the first pair's.
        "attention": _runtime_info(pairs[0])["attention"],
        "dtype": pairs[0].precision,
    }
    if assisted:
        llm = {r["runtime"]: r["tok_per_s"] for r in rows if r["method"] == "llm" and r["read_ahead"] == modes[0]}
        references = [
            {
                "method": "transformers-assisted",
                "runtime": runtime,
                "tok_per_s": tally.tok_per_s,
                "speedup": tally.tok_per_s / llm[runtime] if llm.get(runtime) else None,
            }
            for runtime, tally in assisted.items()
        ]
        result["reference"] = references[0]
    return result


def _read_ahead_modes(read_ahead: ReadAhead | bool | Sequence[ReadAhead | bool]) -> list[ReadAhead]:
    """One policy or several, each once, in the order given."""
    given = [read_ahead] if isinstance(read_ahead, (str, bool)) else list(read_ahead)
    if not given:
        raise ValueError("name at least one read-ahead mode")
    return list(dict.fromkeys(read_ahead_mode(mode) for mode in given))


def _rows(tallies: list[Tally]) -> list[dict]:
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
                "draft_len": _draft_label(tally.config) if info.speculative else None,
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


def _runtime_info(pair: LoadedPair) -> dict:
    info: dict[str, object] = {"precision": pair.precision, "attention": None, "streams": pair.stream_runtimes()}
    if pair.runtime_plan is not None:
        info["plan"] = plan_record(pair.runtime_plan)
    if isinstance(pair.generalist, TransformersModel):  # the transformers runtime
        info["attention"] = pair.generalist.model.config._attn_implementation
    return info


def prefix_reuse(pair: LoadedPair, prepared: Prepared, config: DecodeConfig) -> dict:
    """The first token of a request, then of the same request again: what the prefix cache saves."""
    pair.clear_prefix_caches()
    _, cold = collect(generate(pair, prepared, config))
    _, repeat = collect(generate(pair, prepared, config))
    return {
        "method": config.method,
        "cold_ttft_s": cold.stats.ttft_s,
        "repeat_ttft_s": repeat.stats.ttft_s,
        "ratio": repeat.stats.ttft_s / cold.stats.ttft_s
        if cold.stats.ttft_s and repeat.stats.ttft_s is not None
        else None,
        "reused_tokens": repeat.stats.reused_tokens,
    }


def transformers_assisted(pair, prepared: Prepared, max_new_tokens: int) -> tuple[int, float]:
    """transformers' own assisted generation on the same pair and prompt (greedy): the reference. On a
    cross-tokenizer pair, its universal assisted generation (the draft's text re-tokenized for the
    Generalist), given both tokenizers; the prompt and the end ids are then the Generalist's."""
    generalist, specialist = pair.generalist.model, pair.specialist.model
    large = pair.cross
    tokenizer, chat, stop_ids = (
        (pair.tokenizer, pair.chat, pair.eos_token_ids)
        if large is None
        else (large.tokenizer, large.chat, large.eos_token_ids)
    )
    tokenizers = {} if large is None else {"tokenizer": large.tokenizer, "assistant_tokenizer": pair.tokenizer}
    input_ids = torch.tensor([chat_ids(tokenizer, prepared.prompts.plain, chat)], device=generalist.device)
    eos = sorted(stop_ids)
    started = time.perf_counter()
    with torch.inference_mode():
        output = generalist.generate(
            input_ids,
            assistant_model=specialist,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos[0],
            **tokenizers,
        )
    seconds = time.perf_counter() - started
    return output.shape[1] - input_ids.shape[1], seconds


def _warm_up(pair, prepared: Prepared, configs: list[DecodeConfig]) -> None:
    for method in {c.method for c in configs}:
        collect(generate(pair, prepared, DecodeConfig(method=method, max_new_tokens=8)))


def _draft_label(config: DecodeConfig) -> str:
    if config.adaptive_draft:
        length = "auto" if config.draft_len == MAX_AUTO_DRAFT else f"auto:{config.draft_len}"
    else:
        length = str(config.draft_len)
    return f"{length}@{config.draft_confidence:g}" if config.draft_confidence else length


def _label(case: BenchCase) -> str:
    config = case.config
    info = METHOD_INFO[config.method]
    name = f"{case.name} a={config.alpha:g}" if info.takes_alpha else case.name
    name += f" cda={config.cda_lambda:g}" if config.cda_lambda is not None else ""
    if info.cloud_drafts:
        return f"{name} k={config.p3.draft_len} tau={config.p3.tau:g}"
    return f"{name} k={_draft_label(config)}" if info.speculative else name


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
