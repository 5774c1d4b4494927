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

The cases are ``specsteer.evaluation.bench_plan``'s; each case's totals, its row (speeds, the bound of DESIGN §6
from this run's own step times and acceptance, where the rest goes) and the printed tables are
``specsteer.evaluation.bench_report``'s.

``read_ahead`` may name several policies (specsteer.cloud.read_ahead): each is then a case of the same run,
its rows carrying it (``read_ahead``), and speedups are against ``llm`` under the same policy.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from specsteer.cloud.in_process import InProcessCloud
from specsteer.cloud.read_ahead import DEFAULT_READ_AHEAD, ReadAhead, read_ahead_mode
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Prepared, Request, chat_ids, prepare
from specsteer.evaluation.bench_plan import BenchCase, case_label
from specsteer.evaluation.bench_report import Tally, speed_rows
from specsteer.models.runtime_plan import plan_record
from specsteer.runtimes.base import TransformersModel
from specsteer.runtimes.machine import machine_info

if TYPE_CHECKING:
    from specsteer.models.pair import LoadedPair


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
                        f"prompt {index + 1}/{len(prompts)} [{pair.runtime_label}] {case_label(tally.case)}{shown}: "
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
        for row in speed_rows(tallies[(pair.runtime_label, mode)])
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
