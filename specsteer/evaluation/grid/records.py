"""The records a grid runs on and the prompts it prepares for each (retrieval, noise, prompt style).

Noise (the paper's robustness study): ``noise = n`` appends to each record's Specialist context
the n items least similar to its input (BM25) drawn from the profiles of *other* users' records in
the same file (the first ``max(limit, NOISE_POOL_RECORDS)`` records).

:func:`run_prompts` and :func:`run_facts` rebuild a stored run's prompts and private facts from its config,
for the summaries that need them; no model is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specsteer.data.datasets import Record, load_task_records
from specsteer.data.history import HistoryItem
from specsteer.data.record_files import DataError
from specsteer.data.retrieval import low_similarity_items
from specsteer.data.tasks import DEFAULT_PROMPT_STYLE, PromptPair, as_prompt_style
from specsteer.engine.request import Prepared, Request, prepare
from specsteer.evaluation.grid.spec import EvalSpec, spec_from_config

NOISE_POOL_RECORDS = 64


def noise_items(record: Record, pool: Sequence[Record], n: int) -> list[HistoryItem]:
    """The n items of other users' profiles in ``pool`` least similar to the record's input."""
    if n <= 0:
        return []
    foreign: dict[tuple, HistoryItem] = {}
    for other in pool:
        if _same_user(other, record):
            continue
        for item in other.profile:
            # Two records of one user repeat profile items; noise should not repeat them.
            foreign.setdefault(tuple(sorted(item.fields.items())), item)
    if not foreign:
        raise DataError(f"record {record.id}: noise needs records of other users in the same file")
    return low_similarity_items(record.task, record.input, list(foreign.values()), n)


def _same_user(a: Record, b: Record) -> bool:
    if a.user_id is None or b.user_id is None:
        return a.id == b.id
    return a.user_id == b.user_id


def record_request(
    record: Record, retrieval_k: int, noise: Sequence[HistoryItem] = (), prompt_style: str = DEFAULT_PROMPT_STYLE
) -> Request:
    return Request(
        task=record.task,
        input_text=record.input,
        history=record.profile,
        retrieval_k=retrieval_k,
        noise_items=tuple(noise),
        prompt_style=as_prompt_style(prompt_style),
        profile=record.user_profile,
    )


def load_evaluation_records(spec: EvalSpec) -> tuple[list[Record], dict[str, Prepared]]:
    """The first ``limit`` records of the file and each one's prepared prompts (noise included)."""
    pool_limit = spec.limit if spec.limit is None or not spec.noise else max(spec.limit, NOISE_POOL_RECORDS)
    pool = load_task_records(spec.data, spec.task, limit=pool_limit)
    records = pool[: spec.limit]
    seen: set[str] = set()
    for record in records:
        if record.id in seen:
            raise DataError(f"{Path(spec.data).name}: record id {record.id!r} appears twice; ids name the stored cells")
        seen.add(record.id)
    prepared = {
        record.id: prepare(
            record_request(record, spec.retrieval_k, noise_items(record, pool, spec.noise), spec.prompt_style)
        )
        for record in records
    }
    return records, prepared


def run_prompts(config: Mapping[str, Any], data_dir: Path | None = None) -> dict[str, PromptPair]:
    """The prompts of every record of a stored run, rebuilt as the run built them (retrieval, noise,
    prompt style): what the hygiene measure needs besides the outputs. No model is loaded."""
    spec = spec_from_config(config, data_dir)
    if not Path(spec.data).is_file():
        raise DataError(f"the run's records file {spec.data} is not here; pass the folder that holds it")
    _, prepared = load_evaluation_records(spec)
    return {record_id: item.prompts for record_id, item in prepared.items()}


def run_facts(config: Mapping[str, Any], data_dir: Path | None = None) -> dict[str, tuple[str, ...]]:
    """The private facts of every record of a stored run by record id (empty for tasks without them)."""
    spec = spec_from_config(config, data_dir)
    if not Path(spec.data).is_file():
        raise DataError(f"the run's records file {spec.data} is not here; pass the folder that holds it")
    return {record.id: record.private_facts for record in load_task_records(spec.data, spec.task, limit=spec.limit)}
