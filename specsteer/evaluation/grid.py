"""The evaluation batch: a grid of methods x alpha x beta over N LongLaMP records, stored cell by cell.

One *cell* is one generation: (record, method, alpha, beta). Its output, ROUGE scores and
generation statistics are kept in the run's store (a ``specsteer.service.stores.RunStore``; the app and
the command line use ``storage.SqlRunStore``) the moment it finishes, so a run that crashes or is
cancelled loses at most the generation in flight, and running the same run name again continues
where it stopped (finished cells are skipped; a different config under the same name is refused,
so two runs never mix). A cell whose timing was disturbed (the process stood still mid-generation:
``specsteer.method.timing``) counts as not finished: running the run again re-times it, the new cell
taking its place. :func:`run_grid_events` reports progress as a generator of
:class:`GridProgress` events ending with the :class:`EvalResult`; :func:`run_grid` just runs it.

Grid. alpha and beta only go to the methods that read them (``specsteer.method.catalog``): SpecSteer
takes both, LightCoSteer takes beta, and SLM, SLM+, LLM, SD and CoSteer (whose strength is its own
lambda) take neither, so they run once per record whatever the grid size. ``extra_points`` adds
(alpha, beta) pairs to the methods that take alpha only — the paper's beta study at one alpha —
without multiplying the beta-only baselines.
Decoding is greedy (the paper's setting). Cells run record by record, every method on a record
before the next record, so a partial run compares methods on the same records.

Before the first timed cell one short SpecSteer generation (``WARMUP_TOKENS``, not stored) runs
all three streams once, so one-off start-up costs are not charged to the first method.

Summary (:func:`summarize`), one row per (method, alpha, beta):

* ROUGE — the mean over records of each F-measure, on the 0–100 scale; ``rouge1`` / ``rougeL``
  unstemmed (the LaMP protocol), ``rouge1_stemmed`` / ``rougeL_stemmed`` with the Porter stemmer.
* ``tok_per_s`` — total new tokens / total generation seconds over the row's records (time
  includes prompt prefill and, for speculative methods, every round). Cells whose timing was disturbed
  (the process stood still mid-generation: ``specsteer.method.timing``) are left out of this and of every
  other speed figure below; ``speed_left_out`` says how many of the row's cells that is (its ROUGE, acceptance
  and hygiene keep them).
* ``acceptance`` — total accepted drafts / total drafted tokens (0–1); None for methods that
  do not draft.
* ``speedup`` — the row's tok_per_s divided by the ``llm`` row's, both recomputed over the
  records the two rows share with sound timing, measured in the same run. None when the run has no ``llm`` cells:
  a stored constant would compare timings from another machine state.
* ``decode_tok_per_s`` / ``decode_speedup`` — the same with every stream's first pass (prompt
  processing) left out. On a runtime with prefix reuse (llama.cpp) the first method run on a record
  pays for reading its prompts and the later ones mostly do not, so the decoding phase is the fair
  comparison between methods there.
* ``layout_copy``, ``preamble``, ``refusal`` — output hygiene (``specsteer.data.hygiene``): the share of
  outputs that copy the prompt's item layout, open with a preamble, or refuse; given when the
  summary has the run's prompts (the grid's own result, ``run_prompts`` for a stored run).
* ``rounds``, ``new_tokens``, ``uplink_bytes``, ``downlink_bytes`` — means per generation.

LoRA: ``specialist_lora`` names one adapter for every record, or ``"per-record:DIR"`` an adapter per record
trained on the record's own texts before its cells (``specsteer.evaluation.record_lora``: kept in DIR and read
back on resume; its training seconds and steps in each of the record's cells' stats).

Noise (the paper's robustness study): ``noise = n`` appends to each record's Specialist context
the n items least similar to its input (BM25) drawn from the profiles of *other* users' records in
the same file (the first ``max(limit, NOISE_POOL_RECORDS)`` records).

Command line (``python -m specsteer evaluate --help``). ``--data`` is a file, or ``shared`` (the
real records, ``data.shared_data_path``) or ``sample`` (the bundled synthetic sample). Exit status:
0 finished, 2 bad input (data, arguments, unknown pairing, a run name reused with another config),
1 models that cannot be loaded, 130 cancelled (Ctrl-C or SIGTERM finish the run as cancelled).
``--pairing tiny-test`` is a test-only hook: two random tiny models from ``specsteer.models.tiny`` (the
numbers it gives mean nothing); it lets tests run this command line without real weights.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specsteer.data.datasets import EVALUATION_TASKS, DataError, Record, load_task_records
from specsteer.data.facts import fact_shares, method_exposure
from specsteer.data.history import HistoryItem
from specsteer.data.hygiene import classify_output
from specsteer.data.retrieval import low_similarity_items
from specsteer.data.tasks import DEFAULT_PROMPT_STYLE, PROMPT_STYLES, PromptPair, as_prompt_style
from specsteer.edge.lora import LoraSettings, LoraTrainingError, TrainingStopped
from specsteer.engine.generate import DecodeConfig, Prepared, Request, collect, generate, prepare
from specsteer.evaluation.metrics import ROUGE_KEYS, bootstrap_interval, corpus_rouge, rouge_scores
from specsteer.evaluation.record_lora import (
    PER_RECORD_LABEL,
    RecordAdapter,
    RecordAdapters,
    per_record_root,
    settings_document,
    settings_from_document,
    with_training,
)
from specsteer.evaluation.run_store import CellResult, GridPoint, RunStatus, RunStore, cell_key
from specsteer.evaluation.timing import timed_cells
from specsteer.method.catalog import METHOD_INFO, METHODS, PRIVATE_METHODS, SPEED_REFERENCE
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU, P3Params
from specsteer.models.registry import DEFAULT_PAIRING
from specsteer.models.runtime_plan import PLAN_KEY, RuntimePlan, StoredPlan, plan_record
from specsteer.runtimes.base import check_runtime, dtype_label
from specsteer.util.jsonable import to_jsonable

if TYPE_CHECKING:
    from specsteer.models.loading import LoadedPair
    from specsteer.models.registry import Pairing

WARMUP_TOKENS = 8
NOISE_POOL_RECORDS = 64
JSON_ROW_KEYS = (
    "method",
    "alpha",
    "beta",
    *ROUGE_KEYS,
    "acceptance",
    "tok_per_s",
    "speedup",
    "decode_tok_per_s",
    "decode_speedup",
    "speed_left_out",
    "layout_copy",
    "preamble",
    "refusal",
)
# The privacy audit's shares (``specsteer.data.facts``), in the rows of a run over records with private
# facts (CoGenesis): sent to the cloud, sent though the task did not name them, in the output, sent only in
# rejected drafts. ``--json`` rows carry them after JSON_ROW_KEYS when the run's rows have them.
PRIVACY_ROW_KEYS = ("facts_sent", "facts_sent_beyond_task", "facts_in_output", "facts_rejected_only")


# --------------------------------------------------------------------------- the grid


def grid_points(
    methods: Sequence[str],
    alphas: Sequence[float],
    betas: Sequence[float],
    extra_points: Sequence[tuple[float, float]] = (),
) -> list[GridPoint]:
    """Every distinct (method, alpha, beta) to run, in the order given."""
    points: list[GridPoint] = []
    for method in methods:
        info = METHOD_INFO[method]
        pairs = [(alpha, beta) for alpha in alphas for beta in betas]
        if info.takes_alpha:
            pairs += list(extra_points)
        for alpha, beta in pairs:
            point = GridPoint(
                method, float(alpha) if info.takes_alpha else None, float(beta) if info.takes_beta else None
            )
            if point not in points:
                points.append(point)
    return points


MAX_RUN_NAME_CHARS = 128  # shown in every visitor's run picker


@dataclass(frozen=True)
class EvalSpec:
    """What to evaluate; everything except ``run_name`` is the run's stored config."""

    data: str
    task: str
    methods: tuple[str, ...] = PRIVATE_METHODS  # llm+ (sends the private context) only when named
    alphas: tuple[float, ...] = (1.0, 0.5, 0.1)
    betas: tuple[float, ...] = (1.0,)
    extra_points: tuple[tuple[float, float], ...] = ()
    limit: int | None = None
    pairing: str = DEFAULT_PAIRING
    runtime: str = "auto"  # "auto" | "llama.cpp" | "transformers" (loading.choose_runtime); stored resolved
    dtype: str | None = None  # transformers only; None: hardware.default_dtype()
    max_new_tokens: int = 256
    draft_len: int = 4
    retrieval_k: int = 3
    noise: int = 0
    prompt_style: str = DEFAULT_PROMPT_STYLE  # "paper" (Table 13) or "clean" (no field labels to copy)
    private_guard: int = 0  # the private-span guard's n for the methods whose Edge sends tokens; 0 = off
    # A LoRA adapter directory for the Edge's Specialist (specsteer.models.lora; one for every record, so
    # records of one user); "" for none. Stored as the adapter's label (its name and manifest hash).
    specialist_lora: str = ""
    # With ``specialist_lora = "per-record:DIR"`` (specsteer.evaluation.record_lora): an adapter per record,
    # trained on the record's own texts into DIR with these settings (None: LoraSettings()'s defaults).
    lora_settings: LoraSettings | None = None
    p3_draft_len: int = DEFAULT_DRAFT_LEN  # P³'s Cloud draft length (method p3; specsteer.method.p3)
    p3_tau: float = DEFAULT_TAU  # P³'s threshold
    run_name: str | None = None  # None: a new run named after the task and the time

    def points(self) -> list[GridPoint]:
        return grid_points(self.methods, self.alphas, self.betas, self.extra_points)

    def per_record_lora(self) -> Path | None:
        """The per-record adapters' directory (``specialist_lora = "per-record:DIR"``), or None."""
        return per_record_root(self.specialist_lora)

    def _lora_problems(self) -> list[str]:
        try:
            root = self.per_record_lora()
        except ValueError as error:
            return [str(error)]
        if self.lora_settings is None:
            return []
        if root is None:
            return ["LoRA training settings go with per-record adapters (--specialist-lora per-record:DIR)"]
        try:
            self.lora_settings.validate()
        except LoraTrainingError as error:
            return [f"LoRA training settings: {error}"]
        return []

    def validate(self) -> EvalSpec:
        problems = []
        if self.task not in EVALUATION_TASKS:
            problems.append(f"unknown task {self.task!r}; choose one of {', '.join(EVALUATION_TASKS)}")
        unknown = [method for method in self.methods if method not in METHODS]
        if not self.methods or unknown:
            problems.append(f"methods must be some of {', '.join(METHODS)} (got {', '.join(self.methods) or 'none'})")
        if not self.alphas or not self.betas:
            problems.append("give at least one alpha and one beta")
        grid_values = [*self.alphas, *self.betas, *(value for point in self.extra_points for value in point)]
        if not all(math.isfinite(value) for value in grid_values):
            # alpha = inf (reject every draft) is LightCoSteer, which the grid can run by name.
            problems.append("alpha and beta values must be finite")
        if self.limit is not None and self.limit < 1:
            problems.append("limit must be at least 1")
        if self.noise < 0 or self.retrieval_k < 0:
            problems.append("noise and retrieval k must be >= 0")
        if self.run_name is not None and not 0 < len(self.run_name) <= MAX_RUN_NAME_CHARS:
            problems.append(f"a run name is 1 to {MAX_RUN_NAME_CHARS} characters (got {len(self.run_name)})")
        elif self.run_name is not None and any(ord(char) < 32 or ord(char) == 127 for char in self.run_name):
            problems.append("a run name holds no control characters")
        try:
            check_runtime(self.runtime)
        except ValueError as error:
            problems.append(str(error))
        if self.prompt_style not in PROMPT_STYLES:
            problems.append(f"unknown prompt style {self.prompt_style!r}; choose one of {', '.join(PROMPT_STYLES)}")
        problems += self._lora_problems()
        if problems:
            raise ValueError("; ".join(problems))
        for point in self.points():  # alpha, beta, draft length and token budget ranges
            decode_config(point, self).validate()
        return self


def decode_config(point: GridPoint, spec: EvalSpec) -> DecodeConfig:
    return DecodeConfig(
        method=point.method,
        alpha=DecodeConfig.alpha if point.alpha is None else point.alpha,
        beta=DecodeConfig.beta if point.beta is None else point.beta,
        draft_len=spec.draft_len,
        max_new_tokens=spec.max_new_tokens,
        private_guard=spec.private_guard,
        p3=P3Params(spec.p3_draft_len, spec.p3_tau),
    )


# --------------------------------------------------------------------------- requests


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


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class GridProgress:
    """Where a run stands; ``done`` counts finished cells, including those finished by an earlier attempt."""

    done: int
    total: int
    # "loading" (models) | "warmup" | "running" (a cell is about to run) | "cell-failed" | a final RunStatus
    stage: str
    point: GridPoint | None = None
    record_id: str | None = None
    error: str | None = None  # why the cell failed ("cell-failed")
    detail: str | None = None  # "training": the record's LoRA adapter's training step

    def describe(self) -> str:
        if self.stage == "training":
            return f"[{self.done}/{self.total}] LoRA rec={self.record_id}: {self.detail}"
        if self.stage == "running" and self.point is not None:
            return f"[{self.done + 1}/{self.total}] {self.point.label} rec={self.record_id}"
        if self.stage == "cell-failed" and self.point is not None:
            return f"[{self.done}/{self.total}] failed: {self.point.label} rec={self.record_id}: {self.error}"
        return f"[{self.done}/{self.total}] {self.stage}"


@dataclass(frozen=True)
class CellFailure:
    """A cell whose generation failed: not stored (a resume runs it again), its message kept in the run."""

    record_id: str
    point: GridPoint
    message: str

    def describe(self) -> str:
        return f"{self.point.label} rec={self.record_id}: {self.message}"


_FAILURES_SHOWN = 5  # in the run's error text; the count says how many there were


def failures_text(failures: Sequence[CellFailure]) -> str:
    """The run's error text for failed cells: how many, how to retry them, the first few messages."""
    shown = "; ".join(failure.describe()[:400] for failure in failures[:_FAILURES_SHOWN])
    more = f"; and {len(failures) - _FAILURES_SHOWN} more" if len(failures) > _FAILURES_SHOWN else ""
    return (
        f"{len(failures)} cell(s) failed and are not stored (run again with the same run name to retry them): "
        f"{shown}{more}"
    )


@dataclass
class EvalResult:
    """The last item of :func:`run_grid_events`."""

    run_id: int
    run_name: str
    status: RunStatus  # "finished" | "cancelled" | "running" (this shard is done, others are not yet)
    computed: int  # cells generated by this call (the others were already stored)
    cells: list[CellResult] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[CellFailure] = field(default_factory=list)  # cells of this call whose generation failed


@dataclass(frozen=True)
class _Cell:
    record: Record
    point: GridPoint

    @property
    def key(self) -> str:
        return cell_key(self.record.id, self.point)


def run_config(
    spec: EvalSpec,
    pairing_id: str,
    runtime: str,
    dtype: str | None,
    cells_total: int,
    lora_label: str = "",
    plan: RuntimePlan | None = None,
) -> dict[str, Any]:
    """The stored config: the runtime as resolved here, so that a resume on another runtime is refused
    (and the adapter's label, so that a resume with another adapter is); ``plan``, the plan loaded (each
    stream's runtime and the reasons), under ``runtime_plan`` (read back by models.runtime_plan.StoredPlan)."""
    config = asdict(spec)
    del config["run_name"]
    if not spec.private_guard:
        del config["private_guard"]  # so that runs stored before the guard existed still resume
    del config["specialist_lora"], config["lora_settings"]
    if lora_label:
        config["specialist_lora"] = lora_label
    if spec.per_record_lora() is not None:  # per-record adapters: a distinct run, with their training settings
        config["specialist_lora"] = PER_RECORD_LABEL
        config["lora_settings"] = settings_document(spec.lora_settings or LoraSettings())
    if (spec.p3_draft_len, spec.p3_tau) == (DEFAULT_DRAFT_LEN, DEFAULT_TAU):
        del config["p3_draft_len"], config["p3_tau"]  # likewise for runs stored before P³
    config.update(
        data=str(Path(spec.data).resolve()), pairing=pairing_id, runtime=runtime, dtype=dtype, cells_total=cells_total
    )
    if plan is not None:
        config[PLAN_KEY] = plan_record(plan)
    return config


def open_or_resume(store: RunStore, name: str, config: dict[str, Any]) -> int:
    """``store.open_run`` of ``config``, or of the config of the stored run called ``name`` where the two
    differ only in the plan's record (:func:`resumable_config`); the store's ValueError otherwise."""
    try:
        return store.open_run(name, config)
    except ValueError:
        resumed = resumable_config(store, name, config)
        if resumed == config:
            raise
        return store.open_run(name, resumed)


def resumable_config(store: RunStore, name: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as a resume of the run called ``name`` stores it. A plan's reasons are words about this
    machine's measurements when the run started (and runs stored before plans have none), so a resume
    compares the runtimes (``runtime``), not the reasons: the stored run's plan record is kept as it is."""
    existing = next((run for run in store.runs() if run.name == name), None)
    if existing is None:
        return config
    mine = {key: value for key, value in config.items() if key != PLAN_KEY}
    theirs = {key: value for key, value in existing.config.items() if key != PLAN_KEY}
    if _canonical(mine) != _canonical(theirs):
        return config  # another config: the store refuses it, saying so
    if PLAN_KEY not in existing.config:
        return mine
    # The runtime's spelling is the same, but who reads the Specialist's long prompts (the hand-off) follows
    # this machine's calibration: a resume whose reader differs would mix two kinds of cells in one run.
    stored, planned = StoredPlan.read(existing.config).prompt_reader, StoredPlan.read(config).prompt_reader
    if stored != planned:
        advice = "or resume it with --runtime llama.cpp (llama.cpp alone, as it ran)" if not stored else ""
        raise ValueError(
            f"run {name!r} ran with {_reader_words(stored)}, and this machine's plan now runs "
            f"{_reader_words(planned)} (the calibration changed): its cells would differ in more than the "
            f"method. Run it under a new name{', ' + advice if advice else ''}"
        )
    return {**mine, PLAN_KEY: existing.config[PLAN_KEY]}


def _reader_words(reader: str) -> str:
    return f"the Specialist's long prompts read by {reader} (the hand-off)" if reader else "no prompt hand-off"


def _canonical(config: Mapping[str, Any]) -> Any:
    return json.loads(json.dumps(to_jsonable(dict(config)), sort_keys=True))


def loaded_plan_problem(pair: LoadedPair, runtime: str) -> str | None:
    """Why the pair loaded is not the plan the run stored (auto's split refused at load, each model then on
    one runtime), or None: the run's cells must run on the runtime its config names."""
    if pair.runtime == runtime:
        return None
    reason = pair.runtime_plan.reason if pair.runtime_plan is not None else ""
    return (
        f"the models loaded on {pair.runtime}, not on {runtime} as planned when the run was opened ({reason}); "
        f"run it under a new name, or ask for --runtime {pair.runtime}"
    )


def run_grid_events(
    spec: EvalSpec,
    store: RunStore,
    pair: LoadedPair | None = None,
    cancel: threading.Event | None = None,
    shard: tuple[int, int] = (0, 1),
    turn: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Iterator[GridProgress | EvalResult]:
    """Run (or resume) the grid of ``spec``, keeping every finished cell in ``store`` at once.

    Yields a :class:`GridProgress` at each stage and before each cell, and ends with the
    :class:`EvalResult`, the way ``engine.generate`` yields tokens and ends with ``Finished``.
    ``pair``: a loaded pair to use (tests, the UI); by default ``spec.pairing`` is loaded, and only
    if some cell is left to run. ``cancel`` stops the run between cells and the generation in flight
    within a token; the interrupted cell is not stored, and the run is marked cancelled. An exception
    (raised here, or thrown in by the consumer) marks it failed; a consumer that closes the generator
    early leaves it cancelled, so either way the same run name resumes it.
    ``shard = (i, n)``: this worker runs only the records i, i+n, i+2n, ... so that n workers (other
    processes, other machines on one database) share a run without doing a cell twice. The run is
    finished when every cell is stored; a worker done with its share while others are not yet done
    leaves it running.
    ``turn``: a fresh context manager held around each generation (``turns.ModelTurns.batch``: the app
    gives the models to a waiting interactive generation between cells).
    """
    from specsteer.models.loading import load_pair, lora_runtime_choice, runtime_plan, with_specialist_lora
    from specsteer.models.lora import read_lora
    from specsteer.models.registry import resolve_pairing
    from specsteer.runtimes.hardware import resolve_dtype

    spec.validate()
    shard_index, shard_count = shard
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard must be i/n with 0 <= i < n (got {shard_index}/{shard_count})")
    cancel = cancel or threading.Event()
    if pair is not None:  # refused before a run is opened in the store (a pair loaded here: once loaded)
        _check_methods_run_on(pair, spec)
    records, prepared = load_evaluation_records(spec)
    per_record = spec.per_record_lora()
    if per_record is not None and per_record.exists() and not per_record.is_dir():
        raise ValueError(f"{per_record} is a file; per-record LoRA adapters need a directory")
    lora = read_lora(spec.specialist_lora) if spec.specialist_lora and per_record is None else None
    if lora is not None or per_record is not None:
        lora_runtime_choice(spec.runtime)  # a refusal on llama.cpp, before a run is opened
    if lora is not None and pair is not None:
        pair = with_specialist_lora(pair, lora)
    if per_record is not None and pair is not None:
        pair = _per_record_base(pair)
    pairing: Pairing | None = None
    dtype: str | None
    plan: RuntimePlan | None
    if pair is not None:
        pairing_id, runtime, dtype, plan = pair.pairing_id, pair.runtime, pair.precision, pair.runtime_plan
    else:
        pairing = resolve_pairing(spec.pairing)
        pairing_id = pairing.id
        # The plan load_pair follows (each stream's runtime, and why), stored as the run's; an adapter (one for
        # the run or one per record) runs on transformers only.
        if lora or per_record:
            plan = RuntimePlan.uniform(lora_runtime_choice(spec.runtime))
        else:
            plan = runtime_plan(pairing, spec.runtime)
        runtime = plan.runtime
        dtype = dtype_label(resolve_dtype(spec.dtype)) if runtime == "transformers" else None
    cells = [_Cell(record, point) for record in records for point in spec.points()]
    name = spec.run_name or f"{spec.task}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    label = lora.label if lora is not None else (pair.lora.label if pair is not None and pair.lora else "")
    config = run_config(spec, pairing_id, runtime, dtype, len(cells), label, plan)
    run_id = open_or_resume(store, name, config)
    finished = store.finished_keys(run_id)
    mine = {record.id for position, record in enumerate(records) if position % shard_count == shard_index}
    pending = [cell for cell in cells if cell.key not in finished and cell.record.id in mine]
    store.set_status(run_id, "running")
    computed, failures = 0, list[CellFailure]()
    try:
        if pending:
            yield GridProgress(len(cells) - len(pending), len(cells), "loading")
            if pair is None:
                # per-record adapters are merged later, into a base Specialist that must be on transformers already
                asked = runtime if per_record is not None else spec.runtime
                pair = load_pair(pairing or pairing_id, dtype=spec.dtype, runtime=asked, specialist_lora=lora)
                problem = loaded_plan_problem(pair, runtime)
                if problem:
                    raise ValueError(problem)
            _check_methods_run_on(pair, spec)
            adapters = None
            if per_record is not None:
                pair = _per_record_base(pair)
                base_name = pairing.specialist.name if pairing is not None else ""
                adapters = RecordAdapters(per_record, spec.lora_settings or LoraSettings(), pair, base_name)
            computed, failures = yield from _run_cells(
                pair, pending, prepared, spec, len(cells), cancel, run_id, store, turn, adapters
            )
    except BaseException as error:
        # Exceptions are failures; KeyboardInterrupt, or a consumer closing the generator, a stop.
        status: RunStatus = "failed" if isinstance(error, Exception) else "cancelled"
        store.set_status(run_id, status, error=type(error).__name__ + (f": {error}" if str(error) else ""))
        raise
    stored = store.cells(run_id)
    if computed + len(failures) < len(pending):
        status = "cancelled"
    elif failures:
        status = "failed"  # resumable: the same run name runs the failed cells again
    else:
        status = "finished" if len(stored) == len(cells) else "running"  # other shards still at work
    store.set_status(run_id, status, error=failures_text(failures) if failures else None)
    yield GridProgress(len(stored), len(cells), status)
    prompts = {record_id: item.prompts for record_id, item in prepared.items()}
    facts = {record.id: record.private_facts for record in records}
    summary = summarize(stored, spec.task, prompts, facts)
    yield EvalResult(run_id, name, status, computed, stored, summary, failures)


def grid_method_problem(pair: LoadedPair, spec: EvalSpec) -> str | None:
    """Why the grid holds a method the pair cannot run (a cross-tokenizer pair runs only some), or None."""
    from specsteer.engine.generate import cross_tokenizer_problem

    for point in spec.points():
        problem = cross_tokenizer_problem(pair, decode_config(point, spec))
        if problem:
            return problem
    return None


def _check_methods_run_on(pair: LoadedPair, spec: EvalSpec) -> None:
    """Refuse, before any cell runs, a grid with a method the pair cannot run."""
    problem = grid_method_problem(pair, spec)
    if problem:
        raise ValueError(problem)


def _per_record_base(pair: LoadedPair) -> LoadedPair:
    """The pair per-record adapters are trained on and merged into: its base Specialist on transformers."""
    from specsteer.models.lora import LORA_RUNTIME_MESSAGE, LoraError
    from specsteer.runtimes.base import TransformersModel

    base = pair.cloud_side() if pair.lora is not None else pair
    if not isinstance(base.specialist, TransformersModel):
        raise LoraError(LORA_RUNTIME_MESSAGE)
    return base


def run_grid(
    spec: EvalSpec,
    store: RunStore,
    pair: LoadedPair | None = None,
    cancel: threading.Event | None = None,
    shard: tuple[int, int] = (0, 1),
) -> EvalResult:
    """:func:`run_grid_events` to its end, for callers that need no progress: the result."""
    for event in run_grid_events(spec, store, pair=pair, cancel=cancel, shard=shard):
        if isinstance(event, EvalResult):
            return event
    raise RuntimeError("the grid ended without a result")


def _run_cells(
    pair: LoadedPair,
    pending: list[_Cell],
    prepared: Mapping[str, Prepared],
    spec: EvalSpec,
    total: int,
    cancel: threading.Event,
    run_id: int,
    store: RunStore,
    turn: Callable[[], AbstractContextManager[object]] = nullcontext,
    adapters: RecordAdapters | None = None,
) -> Generator[GridProgress, None, tuple[int, list[CellFailure]]]:
    """Generates and stores the pending cells in order; returns how many it stored and the cells that
    failed. A cell's failure (the Cloud went away, a model pass failed) is kept in the run's error text
    at once and the run goes on with the next cell. ``adapters``: before a record's first pending cell, its
    adapter is trained (or read back) and the record's cells run with it; a failed training fails the
    record's cells, a stopped one stops the run."""
    done = total - len(pending)
    computed = 0
    failures: list[CellFailure] = []
    if pending:
        yield GridProgress(done, total, "warmup")
        warmup = DecodeConfig(method="specsteer", draft_len=spec.draft_len, max_new_tokens=WARMUP_TOKENS)
        with turn():
            collect(generate(pair, prepared[pending[0].record.id], warmup, cancel))
    adapted: dict[str, tuple[LoadedPair, RecordAdapter] | str] = {}  # the current record's pair, or why not
    for cell in pending:
        if cancel.is_set():
            break
        cell_pair, adapter = pair, None
        if adapters is not None:
            found = adapted.get(cell.record.id)  # (rebinding lets the previous record's merged copy go)
            if found is None:
                try:
                    found = yield from _record_entry(adapters, adapted, cell.record, cancel, done + computed, total)
                except TrainingStopped:
                    break
            if isinstance(found, str):
                failures.append(CellFailure(cell.record.id, cell.point, found))
                store.set_status(run_id, "running", error=failures_text(failures))
                yield GridProgress(done + computed, total, "cell-failed", cell.point, cell.record.id, found)
                continue
            cell_pair, adapter = found
        yield GridProgress(done + computed, total, "running", cell.point, cell.record.id)
        try:
            with turn():
                _, result = collect(
                    generate(cell_pair, prepared[cell.record.id], decode_config(cell.point, spec), cancel)
                )
        except Exception as error:  # noqa: BLE001 -- one cell's failure, whatever it is, must not end the run
            failures.append(CellFailure(cell.record.id, cell.point, f"{type(error).__name__}: {error}"))
            store.set_status(run_id, "running", error=failures_text(failures))
            yield GridProgress(done + computed, total, "cell-failed", cell.point, cell.record.id, failures[-1].message)
            continue
        if result.stats.stop_reason == "cancelled":
            break  # a cut-short generation is not a result
        store.save_cell(
            run_id,
            CellResult(
                cell.record.id,
                cell.point,
                result.text,
                rouge_scores(result.text, cell.record.output),
                with_training(result.stats, adapter),
            ),
        )
        computed += 1
    return computed, failures


def _record_entry(
    adapters: RecordAdapters,
    adapted: dict[str, tuple[LoadedPair, RecordAdapter] | str],
    record: Record,
    cancel: threading.Event,
    done: int,
    total: int,
) -> Generator[GridProgress, None, tuple[LoadedPair, RecordAdapter] | str]:
    """The record's pair with its adapter merged in (trained or read back), or why there is none, kept in
    ``adapted`` in place of the previous record's (whose merged copy is let go before the training)."""
    _release(adapters, adapted)
    entry: tuple[LoadedPair, RecordAdapter] | str
    try:
        adapter = yield from _record_adapter(adapters, record, cancel, done, total)
        entry = (adapters.pair_for(adapter), adapter)
    except TrainingStopped:
        raise
    except Exception as error:  # noqa: BLE001 -- the record's cells fail; the run goes on
        entry = f"its LoRA adapter: {type(error).__name__}: {error}"
    adapted[record.id] = entry
    return entry


def _release(adapters: RecordAdapters, adapted: dict[str, tuple[LoadedPair, RecordAdapter] | str]) -> None:
    for entry in adapted.values():
        if not isinstance(entry, str):
            adapters.release(entry[0])
    adapted.clear()


def _record_adapter(
    adapters: RecordAdapters, record: Record, cancel: threading.Event, done: int, total: int
) -> Generator[GridProgress, None, RecordAdapter]:
    """The record's adapter (:mod:`specsteer.evaluation.record_lora`), its training steps as progress."""
    yield GridProgress(done, total, "training", record_id=record.id, detail="the record's adapter…")
    steps = adapters.events(record, cancel)
    try:
        while True:
            try:
                step = next(steps)
            except StopIteration as finished:
                adapter: RecordAdapter = finished.value
                break
            detail = (
                f"step {step.step}/{step.total_steps} (epoch {step.epoch}) loss {step.loss:.4f} {step.elapsed_s:.1f} s"
            )
            yield GridProgress(done, total, "training", record_id=record.id, detail=detail)
    finally:
        steps.close()  # a consumer that stops listening stops the training
    how = "read back" if adapter.reused else "trained"
    detail = f"{how}: {adapter.lora.label}, {adapter.steps} steps, {adapter.seconds:.1f} s of training"
    yield GridProgress(done, total, "training", record_id=record.id, detail=detail)
    return adapter


# --------------------------------------------------------------------------- summary


def _row_order(point: GridPoint) -> tuple:
    rank = METHODS.index(point.method) if point.method in METHODS else len(METHODS)
    # Strict to permissive (alpha descending), as the paper's tables read.
    alpha = point.alpha if point.alpha is not None else float("inf")
    return rank, point.method, -alpha, point.beta if point.beta is not None else 0.0


def _throughput(cells: Sequence[CellResult], decode_only: bool = False) -> float | None:
    """Tokens per second over the cells; ``decode_only`` leaves every stream's first pass out.

    The decoding phase is what compares fairly between the methods of one record: on a runtime
    with prefix reuse the first method to read a prompt pays its processing, the later ones not.
    """
    seconds = sum(cell.stats.seconds - (cell.stats.prefill_seconds if decode_only else 0.0) for cell in cells)
    tokens = sum(cell.stats.new_tokens for cell in cells)
    return tokens / seconds if seconds > 0 else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _speedup(cells: Sequence[CellResult], reference: Sequence[CellResult], decode_only: bool = False) -> float | None:
    shared = {cell.record_id for cell in cells} & {cell.record_id for cell in reference}
    own = _throughput([cell for cell in cells if cell.record_id in shared], decode_only)
    base = _throughput([cell for cell in reference if cell.record_id in shared], decode_only)
    return own / base if own is not None and base else None


def _hygiene(cells: Sequence[CellResult], task: str, prompts: Mapping[str, PromptPair]) -> dict[str, float | None]:
    """Shares of the cells' outputs that copy the prompt's item layout, open with a preamble, or refuse."""
    verdicts = [classify_output(cell.output, task, prompts[cell.record_id]) for cell in cells]
    share = lambda flag: sum(getattr(v, flag) for v in verdicts) / len(verdicts) if verdicts else None  # noqa: E731
    return {"layout_copy": share("layout_copy"), "preamble": share("preamble"), "refusal": share("refusal")}


def _privacy(
    cells: Sequence[CellResult], prompts: Mapping[str, PromptPair], facts: Mapping[str, Sequence[str]]
) -> dict[str, float | None]:
    """Shares of the cells' private facts sent to the cloud (all; those the task did not name), found
    in the output, and sent only in rejected drafts (``specsteer.data.facts``)."""
    shares = fact_shares(
        [
            method_exposure(
                cell.point.method, facts[cell.record_id], prompts[cell.record_id], cell.stats.sent_text, cell.output
            )
            for cell in cells
            if facts.get(cell.record_id)
        ]
    )
    if shares is None:
        return {}
    values = (shares.sent, shares.sent_beyond_task, shares.in_output, shares.rejected_only)
    return dict(zip(PRIVACY_ROW_KEYS, values, strict=True))


def _summary_row(
    point: GridPoint,
    cells: Sequence[CellResult],
    reference: Sequence[CellResult],
    task: str | None,
    prompts: Mapping[str, PromptPair] | None,
    facts: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    stats = [cell.stats for cell in cells]
    drafted = sum(s.drafted for s in stats)
    hygiene = _hygiene(cells, task, prompts) if task and prompts is not None else {}
    privacy = _privacy(cells, prompts, facts) if facts and prompts is not None else {}
    timed = timed_cells(cells)  # speed figures only: quality keeps every cell
    return {
        "method": point.method,
        "alpha": point.alpha,
        "beta": point.beta,
        "records": len(cells),
        **corpus_rouge(cell.rouge for cell in cells),
        "acceptance": sum(s.accepted for s in stats) / drafted if drafted else None,
        "tok_per_s": _throughput(timed),
        "speedup": _speedup(timed, reference) if reference else None,
        "decode_tok_per_s": _throughput(timed, decode_only=True),
        "decode_speedup": _speedup(timed, reference, decode_only=True) if reference else None,
        "speed_left_out": len(cells) - len(timed),
        **hygiene,
        **privacy,
        "rounds": _mean([s.rounds for s in stats]),
        "new_tokens": _mean([s.new_tokens for s in stats]),
        "uplink_bytes": _mean([s.uplink_bytes for s in stats]),
        "downlink_bytes": _mean([s.downlink_bytes for s in stats]),
    }


def summarize(
    cells: Sequence[CellResult],
    task: str | None = None,
    prompts: Mapping[str, PromptPair] | None = None,
    facts: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """One row per (method, alpha, beta) of a run's cells; see the module doc. With the run's task
    and its prompts by record id (:func:`run_prompts`), rows also give the output hygiene shares;
    with the records' private facts as well (:func:`run_facts`, CoGenesis), the privacy shares."""
    groups: dict[GridPoint, list[CellResult]] = {}
    for cell in cells:
        groups.setdefault(cell.point, []).append(cell)
    reference = timed_cells(groups.get(GridPoint(SPEED_REFERENCE), []))
    return [
        _summary_row(point, groups[point], reference, task, prompts, facts) for point in sorted(groups, key=_row_order)
    ]


@dataclass(frozen=True)
class PairedDifference:
    """Two grid points compared record by record on one ROUGE metric (0-100): the records both have,
    how many ``ours`` won, the mean difference and its bootstrap interval over records."""

    ours: GridPoint
    theirs: GridPoint
    metric: str
    records: int
    wins: int
    mean: float
    low: float
    high: float
    level: float = 0.95

    def describe(self) -> str:
        return f"{self.wins}/{self.records} better, {self.mean:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"


def paired_difference(
    cells: Sequence[CellResult],
    ours: GridPoint,
    theirs: GridPoint,
    metric: str = "rougeL",
    draws: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedDifference | None:
    """``ours`` minus ``theirs`` on ``metric`` over the records both have, with a percentile bootstrap
    interval (records resampled with replacement, ``draws`` times, a fixed seed); None without a shared
    record or a score."""
    scores: dict[GridPoint, dict[str, float]] = {ours: {}, theirs: {}}
    for cell in cells:
        if cell.point in scores and (score := cell.rouge.get(metric)) is not None:
            scores[cell.point][cell.record_id] = 100 * score
    return paired_values(ours, theirs, metric, scores[ours], scores[theirs], draws, seed, level)


def paired_values(
    ours: GridPoint,
    theirs: GridPoint,
    metric: str,
    our_values: Mapping[str, float],
    their_values: Mapping[str, float],
    draws: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedDifference | None:
    """:func:`paired_difference` of any per-record values (record id -> value), e.g. a judge's grades."""
    records = sorted(set(our_values) & set(their_values))
    if not records:
        return None
    differences = [our_values[record] - their_values[record] for record in records]
    low, high = bootstrap_interval(differences, draws, seed, level)
    return PairedDifference(
        ours,
        theirs,
        metric,
        len(records),
        sum(d > 0 for d in differences),
        sum(differences) / len(differences),
        low,
        high,
        level,
    )


def spec_from_config(config: Mapping[str, Any], data_dir: Path | None = None) -> EvalSpec:
    """The EvalSpec a stored run was made with (fields added since take their defaults). ``data_dir``:
    where to look for the records file by name when its stored path is gone (a moved checkout)."""
    known = {item.name for item in fields(EvalSpec)}
    values = {key: value for key, value in config.items() if key in known}
    for key in ("methods", "alphas", "betas"):
        values[key] = tuple(values.get(key, ()))
    values["extra_points"] = tuple(tuple(point) for point in values.get("extra_points", ()))
    if isinstance(values.get("lora_settings"), Mapping):
        values["lora_settings"] = settings_from_document(values["lora_settings"])
    stored = Path(values["data"])
    if not stored.is_file() and data_dir is not None and (data_dir / stored.name).is_file():
        values["data"] = str(data_dir / stored.name)
    return EvalSpec(**values)


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


def json_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The command line's ``--json`` rows: exactly JSON_ROW_KEYS, then PRIVACY_ROW_KEYS when any row has the
    privacy audit's shares (a CoGenesis run: the same shares the summary table and the Dashboard show, null
    for a row without them), non-finite numbers as null."""
    keys = JSON_ROW_KEYS + (PRIVACY_ROW_KEYS if any(PRIVACY_ROW_KEYS[0] in row for row in rows) else ())
    return [to_jsonable({key: row.get(key) for key in keys}) for row in rows]


# --------------------------------------------------------------------------- command line
