"""Build assets/example_runs.db: the evaluation runs the docs cite, which the app's Dashboard shows beside the
user's own (read-only) and ``specsteer gpu-profile`` projects by default.

Each run is read from the database its documented command writes (docs/research/: the command beside each
result; those databases stay in the local, ignored ``results/``) and copied as stored through the storage
layer: its config, status and times, and every cell's output, ROUGE scores, statistics and time. One thing is left out to
keep the file a few MB: the per-pass trace of each cell (every model pass and link message with its time,
what the Deployment view replays), except in the runs marked ``traces`` below. The file is then vacuumed
and left in SQLite's rollback-journal mode, so that it opens read-only with no ``-wal``/``-shm`` beside it.

    .venv/bin/python benchmarks/build_example_runs.py [--from results] [--out assets/example_runs.db]

It refuses to start unless every source run is there, and writes the new file beside the old one before
replacing it, so a failed build leaves the committed file as it was.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import storage  # noqa: E402  (the repository root on the path first)
from specsteer.data.sources import EXAMPLE_RUNS_DB  # noqa: E402
from storage.runs import copy_run  # noqa: E402


@dataclass(frozen=True)
class Example:
    name: str  # the run's name, in its source database and among the examples (the docs cite it)
    database: str  # the source database's file name, in --from
    traces: bool  # keep each cell's trace (the Deployment view and gpu-profile replay it)
    cited: str  # where the docs report it


# In the order the Dashboard lists them (after the user's own runs).
EXAMPLES = (
    Example("cogenesis-sweep-dev40", "cogenesis_sweep.db", False, "docs/research/SWEEP_PLAN.md: the α × β sweep"),
    Example("cogenesis-retest", "cogenesis_retest.db", False, "docs/research/SWEEP_PLAN.md: its choice re-tested"),
    Example("cogenesis-retest-p3", "cogenesis_retest.db", False, "docs/research/P3_PLAN.md: P³, joined with it"),
    Example("cogenesis-retest-smollm2", "cogenesis_retest.db", False, "docs/research/SWEEP_PLAN.md: the SmolLM2 pair"),
    Example("longlamp-review-llamacpp-256", "longlamp.db", True, "docs/research/MEASUREMENTS.md: a LongLaMP grid"),
    Example("a2-base", "a2.db", False, "docs/research/P3_PLAN.md: Appendix A.2's table, the base run"),
    Example("a2-lora", "a2.db", False, "docs/research/P3_PLAN.md: Appendix A.2's table, the LoRA run"),
)


def without_trace(stats: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in stats.items() if key != "trace"}


def source_url(folder: Path, example: Example) -> str:
    path = folder / example.database
    if not path.is_file():
        raise SystemExit(f"error: no {path} (run {example.name!r}; {example.cited} has the command that makes it)")
    return storage.read_only_url(path)


def build(folder: Path, out: Path) -> list[tuple[str, int, bool]]:
    """Copy every example into a fresh file at ``out``; (name, cells, traces kept) per run."""
    sources = [(example, source_url(folder, example)) for example in EXAMPLES]
    partial = out.with_name(out.name + ".partial")
    for leftover in (partial, *(partial.with_name(partial.name + suffix) for suffix in ("-wal", "-shm"))):
        leftover.unlink(missing_ok=True)
    target = f"sqlite:///{partial.resolve()}"
    copied = []
    for example, url in reversed(sources):  # newest first is how runs are listed: the first example last
        run = storage.get_run_by_name(example.name, url=url)
        if run is None:
            raise SystemExit(f"error: no run {example.name!r} in {folder / example.database} ({example.cited})")
        copy_run(run.id, source=url, target=target, cell_stats=None if example.traces else without_trace)
        copied.append((example.name, run.cell_count, example.traces))
    storage.reset_engines()  # every connection closed: the write-ahead log is folded into the file
    with sqlite3.connect(partial) as connection:
        connection.execute("PRAGMA journal_mode = DELETE")
    connection = sqlite3.connect(partial)
    connection.execute("VACUUM")
    connection.close()
    os.replace(partial, out)
    return copied[::-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="folder", default="results", help="the source databases' folder")
    parser.add_argument("--out", default=str(EXAMPLE_RUNS_DB), help="the file to write")
    args = parser.parse_args(argv)
    out = Path(args.out)
    for name, cells, traces in build(Path(args.folder), out):
        print(f"{name}: {cells} cells{', with traces' if traces else ''}")
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
