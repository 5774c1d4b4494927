"""Annotation campaigns: an operator prepares a batch of comparisons, annotators judge them one after another.

* **Create** (:meth:`CampaignService.create`): records (the bundled samples, the shared LongLaMP or
  CoGenesis files, or an uploaded file the app kept), a task, the methods, the pairing and decoding
  settings (SpecSteer's α, β among them) and a name; annotators named with a join code each (issued
  here, shown once, only a salted hash kept: ``specsteer.service.join_codes``, which also limits how
  often one client may fail to join), or the campaign open to anyone. On a public app only the
  holder of the operator's token may create one (its generation costs the host) or export.
* **Generate** (:meth:`CampaignService.generate`): each record through ``GenerationService.compare``, its
  comparison linked to the campaign as soon as it is saved; records already done are skipped, so a
  stopped campaign resumes without duplicates, and ``shard=(i, n)`` lets n workers share it.
  The app's panel runs it as a queued event in the models' one slot, so it never overlaps a visitor's
  generation; a closed page or Stop ends it, and generating again resumes it.
* **Judge**: :meth:`join` once per browser session gives a :class:`Seat`; :meth:`view` shows position i
  of the annotator's own blind order (the comparisons and the slots shuffled by a hash of campaign,
  annotator and comparison: deterministic, different per annotator); :meth:`save` checks everything
  and stores the judgement with the seconds from display to save (one per annotator and comparison: a
  second save replaces the first).
* **Results** (:meth:`report`, :meth:`export_rows`): ``specsteer.evaluation.preference`` over the latest
  judgements: Bradley–Terry leaderboard with bootstrap intervals, win matrix, position bias, Fleiss' κ,
  Krippendorff's α, per-annotator counts and median times. An export row of a campaign made from a run's
  outputs also carries the LLM judge's grades of those outputs, where the run has any
  (``specsteer.service.judge_report.export_fields``).

What campaigns take and give is ``specsteer.service.campaign_values``; their limits, the checks of what a
person types and the blind order are ``specsteer.service.campaign_checks``.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import shutil
import tempfile
import threading
import time
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from specsteer.data.datasets import COGENESIS_TASK, EVALUATION_TASKS, load_task_records
from specsteer.data.record_files import DataError
from specsteer.data.sources import resolve_data_source
from specsteer.engine.settings import GenerationSettings, sentence
from specsteer.evaluation.preference import CampaignJudgement, as_campaign_judgement, preference_report
from specsteer.method.catalog import PRIVATE_METHODS
from specsteer.service.campaign_checks import (
    MAX_ANNOTATORS,
    MAX_NAME_CHARS,
    MAX_OPEN_ANNOTATORS,
    MAX_RECORDS,
    MAX_SECONDS,
    annotator_order,
    clean_name,
    judgeable,
    outputs_similarity,
    record_history,
    slot_order,
    valid_ratings,
    valid_rationale,
)
from specsteer.service.campaign_estimate import CampaignEstimate, StoredPaces, calibrated_pace, estimate
from specsteer.service.campaign_values import (
    CampaignError,
    CampaignEvent,
    CampaignGenerated,
    CampaignProgress,
    CampaignReport,
    CampaignRequest,
    CampaignStatusView,
    CreatedCampaign,
    JudgeView,
    Seat,
)
from specsteer.service.checks import RequestChecks
from specsteer.service.events import AnnotationExport, ComparisonSaved, Failed, Stopped
from specsteer.service.generation import GenerationService
from specsteer.service.join_codes import JoinAttempts, check_code, issue_codes
from specsteer.service.judge_report import export_fields
from specsteer.service.limits import stored_id
from specsteer.stores.campaigns import (
    NewCampaign,
    NewCampaignJudgement,
    RunSource,
    StoredCampaign,
    StoredCampaignJudgement,
)
from specsteer.stores.generations import (
    RATING_CRITERIA,
    SPECIAL_PREFERENCES,
    StoredComparison,
    StoredOutput,
    slot_label,
)
from specsteer.stores.protocols import CampaignStore, GenerationStore, JudgeReader, RunStore
from specsteer.util.jsonable import to_jsonable

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- the service


@functools.lru_cache(maxsize=32)
def _record_count(path: str, task: str, limit: int) -> int:
    """How many records a campaign over ``path`` would take (a form asks on every change: read once)."""
    try:
        return len(load_task_records(path, task, limit=limit))
    except (DataError, ValueError, OSError, RecursionError) as error:
        raise CampaignError(sentence(f"The records do not read: {error}")) from None


class CampaignService:
    """Campaigns kept in ``store`` over the comparisons of ``comparisons``, generated by ``generation``, or made
    from the stored evaluation runs of ``runs``; ``checks`` decide what settings and callers may do. Thread-safe
    (the stores are). ``AppService.campaigns`` builds one over the app's own."""

    def __init__(
        self,
        store: CampaignStore,
        comparisons: GenerationStore,
        generation: GenerationService,
        runs: RunStore,
        checks: RequestChecks,
        judges: JudgeReader | None = None,
    ) -> None:
        self.store = store
        self.comparisons = comparisons
        self.generation = generation
        self.runs = runs
        self.checks = checks
        self.attempts = JoinAttempts()  # failed joins per client (specsteer.service.join_codes)
        self.paces = StoredPaces(runs)  # the stored runs' measured speeds, for estimates
        # LLM-judge grades of the runs campaigns are made from: an export row carries its outputs' grades.
        self.judges = judges

    # ----------------------------------------------------------------------- the operator

    def campaign(self, name: str) -> StoredCampaign:
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS * 4:
            raise CampaignError("Choose a campaign.")
        found = self.store.campaign(unicodedata.normalize("NFKC", name).strip())
        if found is None:
            raise CampaignError(f"There is no campaign named {name.strip()[:MAX_NAME_CHARS]!r}.")
        return found

    def campaigns(self) -> list[StoredCampaign]:
        return self.store.campaigns()

    def create(self, request: CampaignRequest, token: str = "") -> CreatedCampaign:
        """Check and store a campaign (nothing generated yet: :meth:`generate` / :meth:`start`)."""
        self.check_operator(token, "Creating a campaign")
        name = clean_name(request.name, "campaign name")
        if request.task not in EVALUATION_TASKS:
            raise CampaignError(f"Choose a task ({', '.join(EVALUATION_TASKS)}).")
        methods = tuple(dict.fromkeys(str(method) for method in request.methods))
        refused = [method[:40] for method in methods if method not in PRIVATE_METHODS]
        if refused:
            offered = ", ".join(PRIVATE_METHODS)
            raise CampaignError(
                f"A campaign compares methods that keep the private context on the device ({offered}); not {', '.join(refused)}."
            )
        if len(methods) < 2:
            raise CampaignError("Choose at least two methods to compare.")
        limit = request.limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECORDS
        ):
            raise CampaignError(f"The number of records is 1 to {MAX_RECORDS}.")
        try:
            settings = self.checks.runnable({**dict(request.settings), "method": methods[0]})
        except ValueError as error:
            raise CampaignError(sentence(str(error))) from None
        source, path = self._data(request.data, request.task)
        try:
            records = load_task_records(path, request.task, limit=limit or MAX_RECORDS)
        except (DataError, ValueError, OSError, RecursionError) as error:
            raise CampaignError(sentence(f"The records do not read: {error}")) from None
        if not records:
            raise CampaignError("The records file holds no record for this task.")
        names = tuple(dict.fromkeys(clean_name(annotator, "annotator's name") for annotator in request.annotators))
        if len(names) > MAX_ANNOTATORS:
            raise CampaignError(f"A campaign has at most {MAX_ANNOTATORS} named annotators.")
        open_to_anyone = bool(request.open_to_anyone) or not names
        codes, stored_codes = issue_codes(names)
        stored = self.store.create_campaign(
            NewCampaign(
                name=name,
                task=request.task,
                methods=methods,
                pairing=settings.pairing,
                settings=to_jsonable(settings),
                data={"source": source, "path": path, "limit": limit},
                planned=len(records),
                open_to_anyone=open_to_anyone,
                annotators=stored_codes,
            )
        )
        return CreatedCampaign(stored, codes)

    def estimate(self, request: CampaignRequest) -> CampaignEstimate:
        """How long generating ``request``'s comparisons would take here (``service.campaign_estimate``: from
        the stored runs' measured speed of its pairing, else the calibration); CampaignError for a request
        that names no records or methods it could generate. Reads the records file (cached), stores nothing."""
        methods = tuple(method for method in dict.fromkeys(request.methods) if method in PRIVATE_METHODS)
        if not methods:
            raise CampaignError("Choose the methods to compare.")
        tokens = request.settings.get("max_new_tokens")
        if (
            isinstance(tokens, bool)
            or not isinstance(tokens, int)
            or not 1 <= tokens <= self.checks.limits.max_new_tokens
        ):
            raise CampaignError(f"Max new tokens is 1 to {self.checks.limits.max_new_tokens}.")
        limit = request.limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RECORDS
        ):
            raise CampaignError(f"The number of records is 1 to {MAX_RECORDS}.")
        note = ""
        if request.data in ("sample", "shared", "shared:dev"):
            _source, path = self._data(request.data, request.task)
            records = _record_count(path, request.task, limit or MAX_RECORDS)
        else:  # an upload: counted when the campaign is created
            records = limit or MAX_RECORDS
            note = f"The uploaded file's records are counted when the campaign is created: up to {records} here."
        pairing = str(request.settings.get("pairing") or "")
        paces = self.paces.paces(pairing)
        for method in methods:
            if method not in paces and (pace := calibrated_pace(pairing, method)) is not None:
                paces[method] = pace
        return estimate(records, methods, tokens, paces, note)

    @staticmethod
    def _data(data: str, task: str) -> tuple[str, str]:
        if not isinstance(data, str) or not data.strip():
            raise CampaignError("Choose the records: the bundled sample, the shared records or an uploaded file.")
        if data in ("sample", "shared", "shared:dev"):
            if data == "shared:dev" and task != COGENESIS_TASK:
                raise CampaignError("Only CoGenesis has a dev split; choose the shared records.")
            try:
                return data, resolve_data_source(data, task)
            except (DataError, ValueError) as error:
                raise CampaignError(sentence(str(error))) from None
        if not Path(data).is_file():  # an uploaded file, kept by EvaluationService.keep_records
            raise CampaignError("The uploaded records file is gone; upload it again.")
        return "upload", str(Path(data))

    def generate(
        self, name: str, cancel: threading.Event | None = None, shard: tuple[int, int] = (0, 1)
    ) -> Iterator[CampaignEvent]:
        """Generate the campaign's missing comparisons (records ``i, i+n, …`` for ``shard=(i, n)``), each
        stored as soon as it is done; resumable (records done are skipped); a set ``cancel`` stops it."""
        cancel = cancel or threading.Event()
        try:
            campaign = self.campaign(name)
            source = RunSource.of(campaign.data)
            if source is not None:  # its outputs are the run's: nothing is generated, no model is loaded
                yield self._imported(campaign, source)
                return
            index, count = shard
            if not 0 <= index < count:
                raise CampaignError(f"A shard is i/n with 0 <= i < n, not {index}/{count}.")
            records = load_task_records(campaign.data["path"], campaign.task, limit=campaign.planned)
        except (CampaignError, DataError, ValueError, OSError) as error:
            yield Failed(sentence(str(error)))
            return
        done = {item.record_key for item in self.store.items(campaign.id)}
        settings = GenerationSettings.from_values(dict(campaign.settings))
        self.store.set_status(campaign.id, "preparing")
        generated = 0
        for position, record in enumerate(records):
            if position % count != index or record.id in done:
                continue
            if cancel.is_set():
                break
            history = record_history(record, campaign.task)
            saved = None
            for event in self.generation.compare(
                history, campaign.task, record.input, settings, campaign.methods, True, cancel
            ):
                if isinstance(event, ComparisonSaved):
                    saved = event.comparison
                elif isinstance(event, Failed):
                    self.store.set_status(campaign.id, "failed", event.message)
                    yield Failed(f"Record {record.id}: {event.message}")
                    return
                elif isinstance(event, Stopped):
                    break
            if saved is None:
                break
            similar = outputs_similarity(saved.texts)
            if self.store.add_item(campaign.id, position, record.id, saved.comparison_id, similar):
                generated += 1
                done.add(record.id)
            yield CampaignProgress(campaign.name, len(done), campaign.planned, record.id)
        ready = len(self.store.items(campaign.id))
        status = "ready" if ready >= campaign.planned else ("stopped" if cancel.is_set() else "preparing")
        if status == "preparing" and count == 1:
            status = "stopped"
        self.store.set_status(campaign.id, status)  # type: ignore[arg-type]
        yield CampaignGenerated(campaign.name, status, ready, campaign.planned, generated)

    @staticmethod
    def _imported(campaign: StoredCampaign, source: RunSource) -> CampaignGenerated | Failed:
        if campaign.ready >= campaign.planned:
            return CampaignGenerated(campaign.name, "ready", campaign.ready, campaign.planned, 0)
        return Failed(
            f"Campaign {campaign.name!r} takes its outputs from run {source.run!r} and generates none; its import "
            f"stopped at {campaign.ready} of {campaign.planned} records. Create it again from the run under another name."
        )

    def check_operator(self, token: str = "", what: str = "Generating a campaign") -> None:
        """ExportRefused unless this caller may create, generate or export (anyone locally; in public, the
        holder of the operator's token); ``what`` names the refused act. A caller checks it before reading
        anything a visitor sent (an uploaded records file)."""
        self.checks.operator(token, what)

    def status(self, name: str) -> CampaignStatusView:
        campaign = self.campaign(name)
        judgements = self.store.judgements(campaign.id)
        source = RunSource.of(campaign.data)
        return CampaignStatusView(
            campaign,
            len({judgement.annotator for judgement in judgements}),
            len(judgements),
            source.describe() if source is not None else None,
            self.near_identical(campaign.id),
        )

    def near_identical(self, campaign_id: int) -> int:
        """How many of the campaign's comparisons hold near-identical outputs (never shown to annotators)."""
        return sum(not judgeable(item.similarity) for item in self.store.items(campaign_id))

    # ----------------------------------------------------------------------- the annotators

    def join(self, campaign_name: str, annotator: str, code: str = "", client: str = "") -> Seat:
        """An annotator's seat at a campaign: by name and join code, or by name alone where it is open.

        ``client``: who is asking (the connection's address), whose failed joins are counted and limited
        (:class:`JoinAttempts`); a wrong code and an unknown name at a closed campaign are failures."""
        campaign = self.campaign(campaign_name)
        wait = self.attempts.wait_s(client, campaign.id)
        if wait is not None:
            raise CampaignError(
                f"Too many failed joins at this campaign from your address: try again in {math.ceil(wait / 60)} "
                "minute(s), with the name and join code your operator gave you."
            )
        name = clean_name(annotator, "annotator's name")
        found = self.store.annotator(campaign.id, name)
        if found is not None and found.code_hash is not None:
            check = check_code(code, found.code_hash)
            if not check.matches:
                self.attempts.failed(client, campaign.id)
                raise CampaignError("That join code is not the one issued to this name.")
            if check.rehash is not None:  # stored unsalted by an earlier version: kept salted from now on
                self.store.set_code_hash(found.id, check.rehash)
        elif found is None:
            if not campaign.open_to_anyone:
                self.attempts.failed(client, campaign.id)
                raise CampaignError("This campaign is for the annotators its operator named: ask for your join code.")
            if self.store.annotator_count(campaign.id) >= MAX_OPEN_ANNOTATORS:
                raise CampaignError(f"This campaign has {MAX_OPEN_ANNOTATORS} annotators already; it takes no more.")
            found = self.store.add_annotator(campaign.id, name, None)
        return Seat(campaign.id, campaign.name, found.id, found.name)

    def _queue(self, seat: Seat) -> list[int]:
        """The comparisons this annotator judges, in their order: every one but those of near-identical outputs."""
        items = [item for item in self.store.items(seat.campaign_id) if judgeable(item.similarity)]
        return annotator_order(seat.campaign_id, seat.annotator, [item.comparison_id for item in items])

    def _own(self, seat: Seat) -> dict[int, StoredCampaignJudgement]:
        return {j.comparison_id: j for j in self.store.judgements(seat.campaign_id, seat.annotator_id)}

    def first_open(self, seat: Seat, after: int = -1) -> int:
        """The position of the next comparison this annotator has not judged after ``after`` (wrapping
        round); ``after + 1`` (the end, clamped) when every one is judged."""
        queue = self._queue(seat)
        own = self._own(seat)
        for step in range(1, len(queue) + 1):
            position = (after + step) % len(queue)
            if queue[position] not in own:
                return position
        return max(0, min(after + 1, len(queue) - 1))

    def _shown(self, seat: Seat, comparison_id: int) -> tuple[StoredComparison, tuple[StoredOutput, ...]]:
        """A comparison and its outputs in the order this annotator sees them (a shuffle of method order)."""
        stored = self.comparisons.comparison(comparison_id)
        if stored is None:
            raise CampaignError(f"Comparison #{comparison_id} is gone.")
        canonical = sorted(stored.outputs, key=lambda output: output.method)
        order = slot_order(seat.campaign_id, seat.annotator, comparison_id, len(canonical))
        return stored, tuple(canonical[slot] for slot in order)

    def view(self, seat: Seat, position: int) -> JudgeView:
        queue = self._queue(seat)
        if not queue:
            skipped = self.near_identical(seat.campaign_id)
            if skipped:
                raise CampaignError(
                    f"This campaign has no comparison to judge: the outputs of all {skipped} ready so far are "
                    "near-identical (nothing to choose between)."
                )
            raise CampaignError("This campaign has no comparison ready yet; try again in a moment.")
        if isinstance(position, bool) or not isinstance(position, int):
            raise CampaignError("Unknown position.")
        position = max(0, min(position, len(queue) - 1))
        comparison_id = queue[position]
        stored, shown = self._shown(seat, comparison_id)
        own = self._own(seat)
        return JudgeView(
            seat.campaign,
            position,
            len(queue),
            len(own),
            comparison_id,
            stored.task,
            stored.input_text,
            shown,
            time.time(),
            own.get(comparison_id),
        )

    def save(
        self,
        seat: Seat,
        view: JudgeView,
        preference: str,
        ratings: Mapping[str, Mapping[str, object]] | None = None,
        rationale: str | None = "",
        now: float | None = None,
    ) -> StoredCampaignJudgement:
        """Check and store a judgement of what ``view`` showed (its slots, its time); CampaignError, with
        nothing saved, for an unknown campaign, comparison or choice, a rating out of range, or a
        rationale that is too long or holds markup. The same judgement saved twice is stored once."""
        if view.campaign != seat.campaign:
            raise CampaignError("This comparison belongs to another campaign.")
        if view.comparison_id not in set(self._queue(seat)):
            raise CampaignError(f"Comparison #{view.comparison_id} is not part of this campaign.")
        _stored, shown = self._shown(seat, view.comparison_id)
        if [output.method for output in shown] != [output.method for output in view.slots]:
            raise CampaignError("This comparison is not shown to you in this order; reload it.")
        labels = {slot_label(slot): output.method for slot, output in enumerate(view.slots)}
        if not isinstance(preference, str) or not (preference in labels or preference in SPECIAL_PREFERENCES):
            options = ", ".join([*labels, *SPECIAL_PREFERENCES])
            raise CampaignError(f"Choose the preferred output ({options}). Nothing was saved.")
        checked_ratings = valid_ratings(ratings, labels)
        text = valid_rationale(rationale)
        elapsed = (time.time() if now is None else now) - view.shown_at
        seconds = round(elapsed, 3) if 0 <= elapsed <= MAX_SECONDS else None
        judgement_id = self.store.save_judgement(
            NewCampaignJudgement(
                campaign_id=seat.campaign_id,
                comparison_id=view.comparison_id,
                annotator_id=seat.annotator_id,
                slots=tuple(labels.values()),
                preference=preference,
                preferred_method=labels.get(preference, preference),
                ratings=checked_ratings,
                rationale=text,
                seconds=seconds,
            )
        )
        return next(j for j in self.store.judgements(seat.campaign_id, seat.annotator_id) if j.id == judgement_id)

    # ----------------------------------------------------------------------- results

    def _chosen(self, name: str | None) -> list[StoredCampaign]:
        return [self.campaign(name)] if name else self.store.campaigns()

    def report(self, name: str | None = None, resamples: int = 1000, seed: int = 0) -> CampaignReport:
        """The leaderboard and its reliability over one campaign's judgements (None: every campaign's)."""
        chosen = self._chosen(name)
        judgements: list[CampaignJudgement] = []
        methods: list[str] = []
        to_judge = near_identical = 0
        for campaign in chosen:
            methods.extend(method for method in campaign.methods if method not in methods)
            judgements.extend(as_campaign_judgement(j) for j in self.store.judgements(campaign.id))
            alike = [not judgeable(item.similarity) for item in self.store.items(campaign.id)]
            to_judge += alike.count(False)
            near_identical += alike.count(True)
        sources = [(campaign.name, RunSource.of(campaign.data)) for campaign in chosen]
        return CampaignReport(
            tuple(campaign.name for campaign in chosen),
            any(campaign.open_to_anyone for campaign in chosen),
            preference_report(judgements, methods, resamples=resamples, seed=seed),
            tuple(f"{name}: {source.describe()}" for name, source in sources if source is not None),
            to_judge,
            near_identical,
        )

    def beside_run(self, run_id: int) -> list[CampaignReport]:
        """The campaigns beside stored evaluation run ``run_id``, each with its report: ROUGE and human
        preference on the same records, read together (the Dashboard). A campaign made from a stored run's
        outputs belongs beside that run only (matched by the run it records); one that generated its own
        outputs, beside every run over the same records (file and task). Those of the run itself first."""
        run = self.runs.run(run_id) if stored_id(run_id) else None
        if run is None:
            raise CampaignError(f"There is no stored run #{str(run_id)[:24]}.")
        data, task = run.config.get("data"), run.config.get("task")
        own, same = [], []
        for campaign in self.store.campaigns():
            source = RunSource.of(campaign.data)
            if source is not None:
                if (source.run, source.run_id) == (run.name, run.id):
                    own.append(campaign)
            elif isinstance(data, str) and campaign.task == task:
                if Path(str(campaign.data.get("path", ""))).resolve() == Path(data).resolve():
                    same.append(campaign)
        return [self.report(campaign.name) for campaign in [*own, *same]]

    def export_rows(self, name: str | None = None, token: str = "") -> list[dict[str, Any]]:
        """Every judgement as a flat row (every field; the outputs' texts by slot)."""
        self.check_operator(token, "Exporting a campaign's judgements")
        rows: list[dict[str, Any]] = []
        for campaign in self._chosen(name):
            source = RunSource.of(campaign.data)
            scores = self.judges.scores(source.run_id) if source is not None and self.judges is not None else []
            records = {item.comparison_id: item.record_key for item in self.store.items(campaign.id)} if scores else {}
            for judgement in self.store.judgements(campaign.id):
                stored = self.comparisons.comparison(judgement.comparison_id)
                texts = {output.method: output.text for output in stored.outputs} if stored else {}
                row: dict[str, Any] = {
                    "campaign": campaign.name,
                    "open_to_anyone": campaign.open_to_anyone,
                    "judgement_id": judgement.id,
                    "comparison_id": judgement.comparison_id,
                    "annotator": judgement.annotator,
                    "task": campaign.task,
                    "pairing": campaign.pairing,
                    "input_text": stored.input_text if stored else "",
                    "slot_order": ";".join(f"{slot_label(i)}={m}" for i, m in enumerate(judgement.slots)),
                    "preference": judgement.preference,
                    "preferred_method": judgement.preferred_method,
                    "rationale": judgement.rationale,
                    "seconds": judgement.seconds,
                    "saves": judgement.saves,
                    "created_at": judgement.created_at.isoformat() if judgement.created_at else None,
                    "updated_at": judgement.updated_at.isoformat() if judgement.updated_at else None,
                }
                for slot, method in enumerate(judgement.slots):
                    row[f"output:{slot_label(slot)}"] = texts.get(method, "")
                for method in judgement.slots:
                    for criterion in RATING_CRITERIA:
                        row[f"rating:{method}:{criterion}"] = judgement.ratings.get(method, {}).get(criterion)
                if source is not None and judgement.comparison_id in records:
                    row |= export_fields(scores, records[judgement.comparison_id], campaign.methods, source)
                rows.append(row)
        return rows

    def export(self, kind: Literal["csv", "jsonl"], name: str | None = None, token: str = "") -> AnnotationExport:
        """A fresh CSV (formula cells neutralised) or JSON-lines file of :meth:`export_rows`."""
        if kind not in ("csv", "jsonl"):
            raise CampaignError(f"Unknown export format {str(kind)[:20]!r}: choose csv or jsonl.")
        rows = self.export_rows(name, token)
        if not rows:
            return AnnotationExport(None, 0)
        folder = Path(tempfile.mkdtemp(prefix="specsteer-campaign-"))
        label = re.sub(r"[^\w.-]", "_", name or "all-campaigns")
        path = folder / f"{label}-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
        try:
            count = self.store.write_export(kind, rows, path)
        except Exception:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return AnnotationExport(path, count)
