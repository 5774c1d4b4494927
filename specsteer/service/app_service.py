"""The application: the one object the tabs, the CLI's composition roots and the tests hand around.

:class:`AppService` is a thin façade. It builds the small services from the collaborators the composition
root (``app.py``) hands in (the stores, the pair catalog, a remote Cloud's secret, the exposure and visitor
limits of where it runs) and passes each call on to the one that owns it:

* ``specsteer.service.generation``: preview, a generation, a comparison, the start-up warm-up;
* ``specsteer.service.evaluation``: evaluation runs, stored runs and their results, the deployment view,
  kept records files;
* ``specsteer.service.annotation``: saved comparisons, judgements, their summary and export;
* ``specsteer.service.remote_clouds``: the settings' "Test connection";
* ``specsteer.service.campaigns``: annotation campaigns over the same comparisons and runs (:meth:`AppService.campaigns`);
* ``specsteer.service.lora_teaching``: teaching a page's Specialist its history.

What they return and report is in ``specsteer.service.events``; the checks every request passes are
``specsteer.service.checks``. This module imports neither a GUI nor a database. See docs/ARCHITECTURE.md,
"The application service and the thin UI".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from specsteer.engine.settings import GenerationSettings
from specsteer.evaluation.deployment_rows import DEFAULT_RTTS_MS
from specsteer.evaluation.grid import EvalSpec
from specsteer.protocol.exposure import Exposure
from specsteer.service.annotation import AnnotationService
from specsteer.service.campaigns import CampaignService
from specsteer.service.checks import RequestChecks
from specsteer.service.evaluation import DEPLOYMENT_RTTS_MS, EvaluationService
from specsteer.service.events import (
    AnnotationExport,
    CloudCheck,
    ComparisonEvent,
    DeploymentReport,
    EvaluationEvent,
    GenerationEvent,
    RetrievalPreview,
    RunResults,
    SavedAnnotation,
)
from specsteer.service.generation import GenerationService
from specsteer.service.limits import VisitorLimits, limits_for
from specsteer.service.lora_teaching import LoraTeacher, TeachEvent
from specsteer.service.pair_catalog import PairCatalog
from specsteer.service.pair_loading import PairLoader
from specsteer.service.remote_clouds import RemoteClouds
from specsteer.service.warmup import WarmUp, WarmUpState
from specsteer.stores.generations import AnnotationSummary, ExportFormat, NamedHistory, NewAnnotation, StoredComparison
from specsteer.stores.protocols import CampaignStore, GenerationStore, JudgeReader, RunStore
from specsteer.stores.runs import StoredRun
from specsteer.util.turns import ModelTurns


class AppService:
    """Generations, comparisons and evaluation runs, saved as they finish; thread-safe (holds no state
    of its own besides the stores and the catalog, which are)."""

    def __init__(
        self,
        store: GenerationStore,
        runs: RunStore,
        pairs: PairCatalog | None = None,
        loading_quiet_s: float = 0.3,
        cloud_secret: str | None = None,
        exposure: Exposure | None = None,
        uploads: Path | None = None,
        limits: VisitorLimits | None = None,
        turns: ModelTurns | None = None,
    ) -> None:
        self.store = store
        self.runs = runs
        self.pairs = pairs or PairCatalog()
        # Local, or public with the operator's choices (which Clouds a visitor may use): app.py reads it
        # from the environment. A public service never connects to an address its operator did not list,
        # so the secret goes only there.
        self.exposure = exposure or Exposure()
        # What one request may ask for (grid size, tokens, text lengths): the public or local defaults.
        self.limits = limits or limits_for(self.exposure.public)
        # One model computation at a time; a waiting generation goes before an evaluation grid's next cell.
        self.turns = turns or ModelTurns()
        # "Teach the Specialist my history": LoRA adapters trained for pages, named by label in settings.
        self.teacher = LoraTeacher(max_steps=self.limits.max_lora_steps)
        self.checks = RequestChecks(self.exposure, self.limits, self.pairs)
        self.clouds = RemoteClouds(cloud_secret, self.exposure)
        self.loader = PairLoader(self.pairs, self.teacher, loading_quiet_s)
        self.generation = GenerationService(store, self.pairs, self.checks, self.clouds, self.loader, self.turns)
        self.evaluation = EvaluationService(
            runs, self.pairs, self.loader, self.turns, self.limits, self.exposure, uploads
        )
        self.annotation = AnnotationService(store, self.limits, self.exposure)

    def campaigns(self, store: CampaignStore, judges: JudgeReader | None = None) -> CampaignService:
        """Annotation campaigns kept in ``store``, over this service's comparisons, runs and checks; an export
        row carries the grades ``judges`` keeps of its run's outputs."""
        return CampaignService(store, self.store, self.generation, self.runs, self.checks, judges)

    @property
    def uploads(self) -> Path | None:
        """Where uploaded records files are kept (``EvaluationService.keep_records``); None keeps none."""
        return self.evaluation.uploads

    # ----------------------------------------------------------------------- generation

    def preview(
        self, history: NamedHistory | None, task: str, input_text: str, retrieval_k: int, prompt_style: str = "paper"
    ) -> RetrievalPreview:
        return self.generation.preview(history, task, input_text, retrieval_k, prompt_style)

    @staticmethod
    def read_history(path: str | Path) -> NamedHistory:
        return GenerationService.read_history(path)

    def generate(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings | Mapping[str, object],
        cancel: threading.Event | None = None,
    ) -> Iterator[GenerationEvent]:
        return self.generation.generate(history, task, input_text, settings, cancel)

    def compare(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings | Mapping[str, object],
        methods: Sequence[str],
        blind: bool,
        cancel: threading.Event | None = None,
    ) -> Iterator[ComparisonEvent]:
        return self.generation.compare(history, task, input_text, settings, methods, blind, cancel)

    def warm_up(
        self,
        history: NamedHistory | None,
        task: str,
        input_text: str,
        settings: GenerationSettings | Mapping[str, object],
    ) -> WarmUp:
        return self.generation.warm_up(history, task, input_text, settings)

    def warm_up_state(self) -> WarmUpState | None:
        return self.loader.warm_up_state()

    def check_cloud(self, address: str, pairing: str | None = None) -> CloudCheck:
        return self.clouds.check(address, pairing)

    # ----------------------------------------------------------------------- teaching the Specialist

    def teach_specialist(
        self,
        session: str,
        history: NamedHistory | None,
        task: str,
        pairing_id: str,
        runtime: str,
        cancel: threading.Event | None = None,
    ) -> Iterator[TeachEvent]:
        """Train a LoRA adapter on ``history`` for the pairing's Specialist (service.lora_teaching): one per
        ``session`` at a time, capped by the visitor limits; its label goes back in ``specialist_lora``."""
        return self.teacher.teach(
            session,
            history,
            task,
            pairing_id,
            runtime,
            lambda pairing, progress: self.pairs.load(pairing, "transformers", progress),
            cancel,
        )

    # ----------------------------------------------------------------------- evaluation runs

    def evaluate(
        self, spec: EvalSpec, cancel: threading.Event | None = None, operator_token: str = ""
    ) -> Iterator[EvaluationEvent]:
        return self.evaluation.evaluate(spec, cancel, operator_token)

    def deployment(
        self,
        run_id: int,
        profile: str,
        rtts_ms: Sequence[float] = DEPLOYMENT_RTTS_MS,
        table_rtts_ms: Sequence[float] = DEFAULT_RTTS_MS,
    ) -> DeploymentReport:
        return self.evaluation.deployment(run_id, profile, rtts_ms, table_rtts_ms)

    def stored_runs(self) -> list[StoredRun]:
        return self.evaluation.stored_runs()

    def stored_run(self, run_id: int) -> StoredRun | None:
        return self.evaluation.stored_run(run_id)

    def run_results(self, run_id: int) -> RunResults | None:
        return self.evaluation.run_results(run_id)

    def keep_records(self, upload: str | Path, task: str) -> Path:
        return self.evaluation.keep_records(upload, task)

    # ----------------------------------------------------------------------- saved comparisons and judgements

    def saved_comparisons(self, limit: int = 100) -> list[StoredComparison]:
        return self.annotation.saved_comparisons(limit)

    def reopen_comparison(self, comparison_id: int) -> StoredComparison:
        return self.annotation.reopen_comparison(comparison_id)

    def annotate(self, annotation: NewAnnotation) -> SavedAnnotation:
        return self.annotation.annotate(annotation)

    def annotation_summary(self) -> AnnotationSummary:
        return self.annotation.annotation_summary()

    def export_annotations(self, kind: ExportFormat, token: str = "") -> AnnotationExport:
        return self.annotation.export_annotations(kind, token)
