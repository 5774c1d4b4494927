"""Evaluation runs: running (or resuming) a grid on a pair, the stored runs and their results, a run
projected onto a deployment profile, and the records files a user uploads for a run.

The grid itself is ``specsteer.evaluation.grid.run_grid_events``; this service checks what a caller may run
here (the visitor limits), loads the pair, gives each cell its own turn of the models, and reads runs back
through the run store the composition root chose. The Dashboard's form decisions are
``specsteer.service.evaluation_runs``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from specsteer.data.datasets import load_records
from specsteer.data.history_upload import MAX_UPLOAD_BYTES
from specsteer.data.json_limits import RECORDS_LIMITS, JsonLimits
from specsteer.data.record_files import DataError
from specsteer.engine.settings import sentence
from specsteer.evaluation.deployment_profiles import get_profile
from specsteer.evaluation.deployment_rows import DEFAULT_RTTS_MS, deployment_rows
from specsteer.evaluation.grid import EvalSpec, grid_method_problem, run_grid_events
from specsteer.evaluation.timing import disturbed_count
from specsteer.models.weights import ModelLoadError
from specsteer.protocol.exposure import Exposure
from specsteer.service.events import DeploymentReport, EvaluationEvent, Failed, RunResults, Status
from specsteer.service.limits import VisitorLimits, stored_id, text_problem
from specsteer.service.pair_catalog import PairCatalog
from specsteer.service.pair_loading import PairLoader
from specsteer.stores.protocols import RunStore
from specsteer.stores.runs import StoredRun
from specsteer.util.turns import ModelTurns

log = logging.getLogger(__name__)

MAX_RECORDS_UPLOAD_BYTES = 10 * MAX_UPLOAD_BYTES  # an evaluation's records file
MAX_RECORDS_UPLOAD_ITEMS = 100_000  # records in an uploaded file (a grid reads at most VisitorLimits.max_records)

# Projected every 10 ms from 0 to 200 ms: the curves are smooth in RTT, and a run of a few hundred
# generations replays in a second or two. The table shows the bundled sweep's RTTs.
DEPLOYMENT_RTTS_MS: tuple[float, ...] = tuple(float(rtt) for rtt in range(0, 201, 10))


class EvaluationService:
    """Evaluation runs on the run store; thread-safe (holds no state of its own besides its collaborators)."""

    def __init__(
        self,
        runs: RunStore,
        pairs: PairCatalog,
        loader: PairLoader,
        turns: ModelTurns,
        limits: VisitorLimits,
        exposure: Exposure,
        uploads: Path | None = None,
    ) -> None:
        self.runs = runs
        self.pairs = pairs
        self.loader = loader
        self.turns = turns
        self.limits = limits
        self.exposure = exposure
        # Where uploaded records files are kept, so that a resumed evaluation finds its file again
        # (the composition root puts it beside the database); None keeps none.
        self.uploads = uploads

    # ----------------------------------------------------------------------- an evaluation run

    def evaluate(
        self, spec: EvalSpec, cancel: threading.Event | None = None, operator_token: str = ""
    ) -> Iterator[EvaluationEvent]:
        """Run (or resume, by run name) an evaluation grid on the pair ``spec`` names, storing every cell
        in the run store as it finishes; a set ``cancel`` leaves the run cancelled and resumable. A grid
        beyond a visitor's cap (``self.limits``) needs the operator's token in public. Each cell takes
        its own turn of the models, so a visitor's generation waits for one cell, not for the grid."""
        refused = self._grid_problem(spec, operator_token)
        if refused:
            yield Failed(refused)
            return
        try:
            spec.validate()
            self.pairs.check(spec.pairing)
        except (ValueError, DataError, OSError) as error:
            yield Failed(sentence(str(error)))
            return
        try:
            pair = yield from self.loader.load(spec.pairing, spec.runtime)
        except ModelLoadError as error:
            yield Failed(sentence(str(error)))
            return
        unavailable = grid_method_problem(pair, spec)
        if unavailable:  # before a run is opened: nothing is stored
            yield Failed(sentence(unavailable))
            return
        yield Status("Reading the records…")
        try:
            yield from run_grid_events(spec, self.runs, pair=pair, cancel=cancel, turn=self.turns.batch)
        except Exception as error:
            if not isinstance(error, (ValueError, DataError, OSError)):
                log.error("evaluation run failed", exc_info=error)
            yield Failed(sentence(f"The run failed ({type(error).__name__}): {error}"))

    def _grid_problem(self, spec: EvalSpec, operator_token: str) -> str | None:
        """Why this caller may not run ``spec`` here (its size, its run name), or None. Checked before
        anything else: a grid's points are counted only once its lists are known to be short."""
        return text_problem("run name", spec.run_name, self.limits.max_name_chars) or self.limits.grid_problem(
            spec.methods, spec.alphas, spec.betas, spec.limit, self.exposure.is_operator(operator_token)
        )

    # ----------------------------------------------------------------------- the deployment projection

    def deployment(
        self,
        run_id: int,
        profile: str,
        rtts_ms: Sequence[float] = DEPLOYMENT_RTTS_MS,
        table_rtts_ms: Sequence[float] = DEFAULT_RTTS_MS,
    ) -> DeploymentReport:
        """A stored run's traced generations projected onto the bundled ``profile`` at each RTT
        (``deployment_rows.deployment_rows``). ValueError, as a sentence, for an unknown profile."""
        try:
            chosen = get_profile(profile)
        except ValueError as error:
            raise ValueError(sentence(str(error))) from None
        cells = self.runs.cells(run_id)
        traced = [cell for cell in cells if cell.stats.trace]
        disturbed = disturbed_count(traced)
        rows = deployment_rows(traced, chosen.name, rtts_ms) if len(traced) > disturbed else []
        shown = tuple(float(rtt) for rtt in table_rtts_ms if float(rtt) in {float(r) for r in rtts_ms})
        return DeploymentReport(
            run_id, chosen, tuple(float(rtt) for rtt in rtts_ms), shown, tuple(rows), len(cells), len(traced), disturbed
        )

    # ----------------------------------------------------------------------- stored evaluation runs

    def stored_runs(self) -> list[StoredRun]:
        """Every stored evaluation run, newest first."""
        return self.runs.runs()

    def stored_run(self, run_id: int) -> StoredRun | None:
        """A stored run (its name, config, status and cell count), or None when there is no run of that id."""
        return self.runs.run(run_id) if stored_id(run_id) else None

    def run_results(self, run_id: int) -> RunResults | None:
        """A stored run and its cells, or None when there is no run of that id."""
        run = self.runs.run(run_id) if stored_id(run_id) else None
        return RunResults(run, tuple(self.runs.cells(run.id))) if run is not None else None

    def keep_records(self, upload: str | Path, task: str) -> Path:
        """Keep an uploaded records file (so that a resumed run finds it) once it reads as ``task``'s records.

        The copy keeps the file's own name, in a folder named after its content's hash, so that every
        message about it names the user's file. A file that does not read is removed again (nothing
        rejected stays kept), and ValueError, as a sentence, says why.
        """
        if self.uploads is None:
            raise ValueError("This app keeps no uploaded files: choose the bundled or the shared records.")
        source = Path(upload)
        size = source.stat().st_size
        cap = min(MAX_RECORDS_UPLOAD_BYTES, self.limits.max_upload_bytes)
        if size > cap:
            raise ValueError(f"{source.name} is {size / 1e6:.1f} MB; the limit is {cap // (1024 * 1024)} MB.")
        try:  # read where it was uploaded, before anything is kept: a file that does not read leaves nothing
            load_records(source, task, json_limits=JsonLimits(RECORDS_LIMITS.max_depth, cap, MAX_RECORDS_UPLOAD_ITEMS))
        except (DataError, ValueError, OSError) as error:
            raise ValueError(sentence(str(error))) from None
        folder = self.uploads / hashlib.sha256(source.read_bytes()).hexdigest()[:16]
        target = folder / source.name
        if target.is_file():
            return target  # read before: the same content under the same name
        folder.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(source, target)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return target
