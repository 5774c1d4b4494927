"""Persistence for SpecSteer: histories, generations, comparisons, annotations, evaluation runs.

One module per concern, each a set of small functions that open their own short session:

* ``storage.db`` owns the engine (SQLite with WAL and foreign keys by default, ``DATABASE_URL``
  for anything else, a SQLite file read-only by ``read_only_url``) and hands out sessions; ``storage.models`` declares the tables;
* ``storage.histories``, ``storage.generations``, ``storage.comparisons`` (comparisons and their
  annotations), ``storage.runs`` (evaluation runs and cells), ``storage.campaigns``,
  ``storage.campaign_judgements`` and ``storage.judge_scores`` (LLM judges' grades and verdicts of runs' cells)
  read and write them;
* the adapters, one per store protocol of ``specsteer.stores.protocols``, each ``Sql<Concept>Store`` in
  ``storage/<concept>_store.py``: ``SqlGenerationStore``, ``SqlRunStore``, ``SqlCampaignStore``, ``SqlJudgeStore``;
* ``storage.exports`` (CSV / JSON-lines files) is pure: it never touches the database. What judgements add
  up to (win rates, agreement) is ``specsteer.evaluation.preference``'s, and their vocabulary
  ``specsteer.stores.generations``'.

This package may import ``specsteer``'s light modules (the store protocols and the typed values
that cross them); the decoding library never imports this package.
"""

from storage.campaign_store import SqlCampaignStore
from storage.comparisons import (
    annotation_summary,
    annotations_export_rows,
    get_comparison,
    list_annotations,
    list_comparisons,
    save_annotation,
    save_comparison,
)
from storage.db import (
    database_url,
    get_engine,
    init_db,
    missing_sqlite_file,
    read_only_url,
    reset_engines,
    session_scope,
)
from storage.exports import write_annotations_csv, write_annotations_jsonl
from storage.generation_store import SqlGenerationStore
from storage.generations import get_generation, list_generations, save_generation
from storage.histories import get_history, list_histories, save_history
from storage.judge_scores import run_scores, run_verdicts
from storage.judge_store import SqlJudgeStore
from storage.models import ROUGE_KEYS, RUN_STATUSES
from storage.run_store import SqlRunStore
from storage.runs import (
    StoredRun,
    create_run,
    finished_cell_keys,
    get_run,
    get_run_by_name,
    list_runs,
    run_cells,
    save_cell,
    set_run_status,
)

__all__ = [
    "ROUGE_KEYS",
    "RUN_STATUSES",
    "SqlCampaignStore",
    "SqlGenerationStore",
    "SqlJudgeStore",
    "SqlRunStore",
    "StoredRun",
    "annotation_summary",
    "annotations_export_rows",
    "create_run",
    "database_url",
    "missing_sqlite_file",
    "read_only_url",
    "finished_cell_keys",
    "get_comparison",
    "get_engine",
    "get_generation",
    "get_history",
    "get_run",
    "get_run_by_name",
    "init_db",
    "list_annotations",
    "list_comparisons",
    "list_generations",
    "list_histories",
    "list_runs",
    "reset_engines",
    "run_cells",
    "run_scores",
    "run_verdicts",
    "save_annotation",
    "save_cell",
    "save_comparison",
    "save_generation",
    "save_history",
    "session_scope",
    "set_run_status",
    "write_annotations_csv",
    "write_annotations_jsonl",
]
