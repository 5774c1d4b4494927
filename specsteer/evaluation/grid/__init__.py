"""The evaluation batch: a grid of methods x alpha x beta over N records, stored cell by cell.

One job per module:

* :mod:`~specsteer.evaluation.grid.spec`: what to evaluate (:class:`EvalSpec`, the run's stored config), its
  grid points and each point's decoding;
* :mod:`~specsteer.evaluation.grid.records`: the records and the prompts prepared for each (retrieval, noise);
* :mod:`~specsteer.evaluation.grid.plan`: the run's stored config (the runtime plan included), opening or
  resuming it by name, the cells left to run and their order;
* :mod:`~specsteer.evaluation.grid.specialists`: which pair serves each record (the pairing's Specialist, one
  LoRA adapter, or an adapter per record), decided in one place;
* :mod:`~specsteer.evaluation.grid.events`: what a running grid reports (progress, failed cells, the result);
* :mod:`~specsteer.evaluation.grid.runner`: opening a run, running one cell, the sequential loop that stores
  each cell the moment it finishes, finishing the run;
* :mod:`~specsteer.evaluation.grid.ray_executor`: the runner's steps with the cells on a Ray cluster's workers
  (``evaluate --ray``; Ray is an optional extra, imported there only);
* :mod:`~specsteer.evaluation.grid.summary`: summary rows and paired differences over a run's cells.

Command line (``python -m specsteer evaluate --help``). ``--data`` is a file, or ``shared`` (the
real records, ``data.shared_data_path``) or ``sample`` (the bundled synthetic sample). Exit status:
0 finished, 2 bad input (data, arguments, unknown pairing, a run name reused with another config),
1 models that cannot be loaded, 130 cancelled (Ctrl-C or SIGTERM finish the run as cancelled).
``--pairing tiny-test`` is a test-only hook: two random tiny models from ``specsteer.models.tiny`` (the
numbers it gives mean nothing); it lets tests run this command line without real weights.
"""

from specsteer.evaluation.grid.events import CellFailure, EvalResult, GridProgress, failures_text
from specsteer.evaluation.grid.plan import (
    GridCell,
    loaded_plan_problem,
    open_or_resume,
    pending_cells,
    resumable_config,
    run_config,
)
from specsteer.evaluation.grid.records import (
    NOISE_POOL_RECORDS,
    load_evaluation_records,
    noise_items,
    record_request,
    run_facts,
    run_prompts,
)
from specsteer.evaluation.grid.runner import (
    WARMUP_TOKENS,
    GridRun,
    finish_grid_run,
    grid_method_problem,
    open_grid_run,
    run_cell,
    run_grid,
    run_grid_events,
)
from specsteer.evaluation.grid.spec import MAX_RUN_NAME_CHARS, EvalSpec, decode_config, grid_points, spec_from_config
from specsteer.evaluation.grid.specialists import RecordPair, SpecialistChoice
from specsteer.evaluation.grid.summary import (
    CROSSING_ROW_KEYS,
    JSON_ROW_KEYS,
    PRIVACY_ROW_KEYS,
    PairedDifference,
    json_rows,
    paired_difference,
    paired_values,
    row_point,
    summarize,
)

__all__ = [
    "CROSSING_ROW_KEYS",
    "JSON_ROW_KEYS",
    "MAX_RUN_NAME_CHARS",
    "NOISE_POOL_RECORDS",
    "PRIVACY_ROW_KEYS",
    "WARMUP_TOKENS",
    "CellFailure",
    "EvalResult",
    "EvalSpec",
    "GridCell",
    "GridProgress",
    "GridRun",
    "PairedDifference",
    "RecordPair",
    "SpecialistChoice",
    "decode_config",
    "failures_text",
    "finish_grid_run",
    "grid_method_problem",
    "grid_points",
    "json_rows",
    "load_evaluation_records",
    "loaded_plan_problem",
    "noise_items",
    "open_grid_run",
    "open_or_resume",
    "paired_difference",
    "paired_values",
    "pending_cells",
    "record_request",
    "resumable_config",
    "row_point",
    "run_cell",
    "run_config",
    "run_facts",
    "run_grid",
    "run_grid_events",
    "run_prompts",
    "spec_from_config",
    "summarize",
]
