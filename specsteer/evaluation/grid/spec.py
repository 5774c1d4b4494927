"""What a grid evaluates: :class:`EvalSpec` (its stored config), its grid points and each point's decoding.

Grid. alpha and beta only go to the methods that read them (``specsteer.method.catalog``): SpecSteer
takes both, LightCoSteer takes beta, and SLM, SLM+, LLM, SD and CoSteer (whose strength is its own
lambda) take neither, so they run once per record whatever the grid size. ``extra_points`` adds
(alpha, beta) pairs to the methods that take alpha only — the paper's beta study at one alpha —
without multiplying the beta-only baselines. ``acceptance`` runs SpecSteer's points under the fixed α, under CDA
at each of ``cda_lambdas`` (``specsteer.method.acceptance``), or both; the rule is part of the point
(``GridPoint.cda_lambda``), of its cell's key and of its row (``cda_lambda``), so one run may hold both.
Decoding is greedy (the paper's setting).

LoRA: ``specialist_lora`` names one adapter for every record, or ``"per-record:DIR"`` an adapter per record
trained on the record's own texts before its cells (``specsteer.evaluation.record_lora``: kept in DIR and read
back on resume; its training seconds and steps in each of the record's cells' stats).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from specsteer.data.datasets import EVALUATION_TASKS
from specsteer.data.tasks import DEFAULT_PROMPT_STYLE, PROMPT_STYLES
from specsteer.edge.lora import LoraSettings, LoraTrainingError
from specsteer.engine.decode_config import DecodeConfig
from specsteer.evaluation.record_lora import per_record_root, settings_from_document
from specsteer.method.catalog import METHOD_INFO, METHODS, PRIVATE_METHODS
from specsteer.method.p3 import DEFAULT_DRAFT_LEN, DEFAULT_TAU, P3Params
from specsteer.models.registry import DEFAULT_PAIRING
from specsteer.runtimes.base import check_runtime
from specsteer.stores.runs import GridPoint


def grid_points(
    methods: Sequence[str],
    alphas: Sequence[float],
    betas: Sequence[float],
    extra_points: Sequence[tuple[float, float]] = (),
    acceptance: Sequence[float | None] = (None,),
) -> list[GridPoint]:
    """Every distinct (method, alpha, beta, acceptance rule) to run, in the order given. ``acceptance``: the rules of
    the methods that take alpha, None for the fixed α and a number for CDA's λ; the others run once."""
    points: list[GridPoint] = []
    for method in methods:
        info = METHOD_INFO[method]
        pairs = [(alpha, beta) for alpha in alphas for beta in betas]
        if info.takes_alpha:
            pairs += list(extra_points)
        for rule in acceptance if info.takes_alpha else (None,):
            for alpha, beta in pairs:
                point = GridPoint(
                    method,
                    float(alpha) if info.takes_alpha else None,
                    float(beta) if info.takes_beta else None,
                    None if rule is None else float(rule),
                )
                if point not in points:
                    points.append(point)
    return points


ACCEPTANCE_CHOICES = ("fixed", "cda", "fixed,cda")  # EvalSpec.acceptance: the rules a grid runs SpecSteer under

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
    runtime: str = "auto"  # "auto" | "llama.cpp" | "transformers" (models.planning.runtime_plan); stored resolved
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
    # The acceptance rules SpecSteer's points run under (ACCEPTANCE_CHOICES): the fixed α, CDA at each of
    # ``cda_lambdas`` (specsteer.method.acceptance), or both (each a point of the grid).
    acceptance: str = "fixed"
    cda_lambdas: tuple[float, ...] = (1.0,)
    run_name: str | None = None  # None: a new run named after the task and the time

    def points(self) -> list[GridPoint]:
        return grid_points(self.methods, self.alphas, self.betas, self.extra_points, self.acceptance_rules())

    def acceptance_rules(self) -> list[float | None]:
        """The grid's acceptance rules as GridPoint names them: None (the fixed α), then each λ of CDA."""
        rules = self.acceptance.split(",")
        return [None] * ("fixed" in rules) + ([float(value) for value in self.cda_lambdas] if "cda" in rules else [])

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
        if self.acceptance not in ACCEPTANCE_CHOICES:
            problems.append(f"acceptance must be one of {', '.join(ACCEPTANCE_CHOICES)}, not {self.acceptance!r}")
        elif "cda" in self.acceptance and not self.cda_lambdas:
            problems.append("CDA needs at least one λ")
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
        cda_lambda=point.cda_lambda,
    )


def spec_from_config(config: Mapping[str, Any], data_dir: Path | None = None) -> EvalSpec:
    """The EvalSpec a stored run was made with (fields added since take their defaults). ``data_dir``:
    where to look for the records file by name when its stored path is gone (a moved checkout)."""
    known = {item.name for item in fields(EvalSpec)}
    values = {key: value for key, value in config.items() if key in known}
    for key in ("methods", "alphas", "betas"):
        values[key] = tuple(values.get(key, ()))
    if "cda_lambdas" in values:
        values["cda_lambdas"] = tuple(values["cda_lambdas"])
    values["extra_points"] = tuple(tuple(point) for point in values.get("extra_points", ()))
    if isinstance(values.get("lora_settings"), Mapping):
        values["lora_settings"] = settings_from_document(values["lora_settings"])
    stored = Path(values["data"])
    if not stored.is_file() and data_dir is not None and (data_dir / stored.name).is_file():
        values["data"] = str(data_dir / stored.name)
    return EvalSpec(**values)
