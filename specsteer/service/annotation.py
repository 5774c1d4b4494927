"""Saved comparisons and their judgements: reopening one for a new judgement (a blind one in a fresh order),
saving a page's judgement, the summary of every judgement, and their export for the operator.

The Compare tab's decisions (what a page shows, the checks of a judgement, the summary's rows) are
``specsteer.service.judging``; what the judgements add up to is computed where they are kept.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from specsteer.protocol.exposure import Exposure
from specsteer.service.checks import require_operator
from specsteer.service.events import AnnotationExport, SavedAnnotation
from specsteer.service.limits import VisitorLimits, stored_id, text_problem
from specsteer.stores.generations import AnnotationSummary, ExportFormat, NewAnnotation, StoredComparison
from specsteer.stores.protocols import GenerationStore


class AnnotationService:
    """Saved comparisons and judgements on the generation store; thread-safe (the store is)."""

    def __init__(self, store: GenerationStore, limits: VisitorLimits, exposure: Exposure) -> None:
        self.store = store
        self.limits = limits
        self.exposure = exposure

    # ----------------------------------------------------------------------- saved comparisons and judgements

    def saved_comparisons(self, limit: int = 100) -> list[StoredComparison]:
        """The newest saved comparisons, newest first."""
        return self.store.recent_comparisons(limit)

    def reopen_comparison(self, comparison_id: int) -> StoredComparison:
        """A saved comparison for a new judgement: a blind one in a fresh random order, so that each
        annotator sees their own. ValueError, as a sentence, when there is none of that id."""
        comparison = self.store.comparison(comparison_id) if stored_id(comparison_id) else None
        if comparison is None:
            raise ValueError(f"Comparison #{comparison_id} does not exist.")
        if not comparison.blind:
            return comparison
        outputs = list(comparison.outputs)
        random.SystemRandom().shuffle(outputs)
        return replace(comparison, outputs=tuple(outputs))

    def annotate(self, annotation: NewAnnotation) -> SavedAnnotation:
        """Save one judgement, in place of its page's earlier one of the comparison if any (``judging``); ValueError
        naming what is wrong (an unknown label, a score out of range, a name or comment longer than ``self.limits``
        allow)."""
        refused = text_problem("annotator's name", annotation.annotator, self.limits.max_name_chars) or text_problem(
            "comment", annotation.comment, self.limits.max_comment_chars
        )
        if refused:
            raise ValueError(refused)
        if not stored_id(annotation.comparison_id):
            raise ValueError(f"Comparison #{annotation.comparison_id} does not exist.")
        stored = self.store.save_annotation(annotation)
        saved = self.store.comparison(annotation.comparison_id)
        by_method = {output.method: output for output in saved.outputs} if saved is not None else {}
        return SavedAnnotation(
            stored.id,
            tuple(by_method[method] for method in annotation.display_order if method in by_method),
            stored.replaced,
        )

    def annotation_summary(self) -> AnnotationSummary:
        """Win rates, mean ratings and agreement over every saved judgement, one per page session and
        comparison (unverified: ``specsteer.service.judging``)."""
        return self.store.annotation_summary()

    def export_annotations(self, kind: ExportFormat, token: str = "") -> AnnotationExport:
        """Every annotation in a fresh CSV or JSON-lines file: for anyone in a local run, for the holder
        of the operator's token in public (annotator names and comments are not every visitor's).
        ExportRefused otherwise."""
        if kind not in ("csv", "jsonl"):
            raise ValueError(f"Unknown export format {kind!r}: choose csv or jsonl.")
        require_operator(self.exposure, token, "Exporting every annotation")
        folder = Path(tempfile.mkdtemp(prefix="specsteer-export-"))
        path = folder / f"annotations-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
        count = self.store.write_annotations(kind, path)
        if count == 0:
            shutil.rmtree(folder, ignore_errors=True)
            return AnnotationExport(None, 0)
        return AnnotationExport(path, count)
