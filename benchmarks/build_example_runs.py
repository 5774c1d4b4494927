"""Build assets/example_runs.db: the evaluation runs the docs cite, which the app's Dashboard shows beside the
user's own (read-only) and ``specsteer gpu-profile`` projects by default.

Each run is read from the database its documented command writes (docs/research/: the command beside each
result; those databases stay in the local, ignored ``results/``), through a snapshot of it in a temporary folder
(so a database still being written can be a source, and one made by an earlier version gains the newer columns
in the snapshot, never in itself), and copied as stored through the storage layer: its config, status and
times, and every cell's output, ROUGE scores, statistics and time. One thing is left out to keep the file a few
MB: the per-pass trace of each cell (every model pass and link message with its time, what the Deployment view
replays), except in the runs marked ``traces`` below. The LLM judge's grades and pairwise verdicts of a run
(``JUDGED`` below) are copied onto it, as stored, from the database the judge wrote them to. The file is then
vacuumed and left in SQLite's rollback-journal mode, so that it opens read-only with no ``-wal``/``-shm``
beside it.

    .venv/bin/python benchmarks/build_example_runs.py [--from results] [--out assets/example_runs.db]

It refuses to start unless every source run, and every judged run (the example's own, by its config), is there, and
writes the new file beside the old one before replacing it, so a failed build leaves the committed file as it was.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import storage  # noqa: E402  (the repository root on the path first)
from specsteer.data.sources import EXAMPLE_RUNS_DB  # noqa: E402
from specsteer.stores.runs import StoredRun  # noqa: E402
from storage.judge_scores import CopiedJudgements, copy_judgements  # noqa: E402
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
    Example("cda-dev40", "cda.db", False, "docs/research/CDA_PLAN.md: the CDA settings on the dev records"),
    Example("cda-test120", "cda.db", False, "docs/research/CDA_PLAN.md: the chosen CDA setting on the test records"),
    Example("longlamp-review-llamacpp-256", "longlamp.db", True, "docs/research/MEASUREMENTS.md: a LongLaMP grid"),
    Example("a2-base", "a2.db", False, "docs/research/P3_PLAN.md: Appendix A.2's table, the base run"),
    Example("a2-lora", "a2.db", False, "docs/research/P3_PLAN.md: Appendix A.2's table, the LoRA run"),
)


@dataclass(frozen=True)
class Judged:
    run: str  # an example's name: the run whose cells the judge graded
    database: str  # the file in --from the judge wrote to: a copy of that run (of the example file) with judge tables
    cited: str  # where the docs report the grades


JUDGED = (
    Judged("cogenesis-retest", "cogenesis_judged.db", "docs/research/SWEEP_PLAN.md: an LLM judge on the re-test"),
)


def without_trace(stats: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in stats.items() if key != "trace"}


def source_file(folder: Path, database: str, run: str, cited: str) -> Path:
    path = folder / database
    if not path.is_file():
        raise SystemExit(f"error: no {path} (run {run!r}; {cited} has the command that makes it)")
    return path


def snapshot(path: Path, scratch: Path) -> str:
    """The URL of a copy of the database ``path`` in ``scratch``, as it was at one moment (SQLite's online backup
    over a read-only connection: a database still being written can be a source, and is never written). The copy
    is opened for writing, so that one made by an earlier version gains there the columns added since."""
    copy = scratch / path.name
    if not copy.exists():  # the runs of one file share its copy
        source, target = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
    return f"sqlite:///{copy}"


def source_run(name: str, url: str, where: Path, cited: str) -> StoredRun:
    run = storage.get_run_by_name(name, url=url)
    if run is None:
        raise SystemExit(f"error: no run {name!r} in {where} ({cited})")
    return run


def graded_run(judged: Judged, url: str, where: Path, examples: dict[str, StoredRun]) -> StoredRun:
    """The run the judge graded, once it is known to be that example's run (the same config)."""
    if judged.run not in examples:
        raise SystemExit(f"error: judged run {judged.run!r} is not among the examples")
    run = source_run(judged.run, url, where, judged.cited)
    if run.config != examples[judged.run].config:
        raise SystemExit(f"error: run {judged.run!r} in {where} is not the example's (another config; {judged.cited})")
    return run


def build(folder: Path, out: Path) -> list[tuple[str, int, bool, CopiedJudgements | None]]:
    """Copy every example, and its judge's results where ``JUDGED`` names it, into a fresh file at ``out``;
    (name, cells, traces kept, judge results copied) per run."""
    files = [source_file(folder, example.database, example.name, example.cited) for example in EXAMPLES]
    judged_files = [source_file(folder, judged.database, judged.run, judged.cited) for judged in JUDGED]
    partial = out.with_name(out.name + ".partial")
    with tempfile.TemporaryDirectory(prefix="example-sources-") as scratch:
        try:
            urls = [snapshot(path, Path(scratch)) for path in files]
            runs = [
                source_run(example.name, url, path, example.cited)
                for example, url, path in zip(EXAMPLES, urls, files, strict=True)
            ]
            by_name = {run.name: run for run in runs}
            graded = {}
            for judged, path in zip(JUDGED, judged_files, strict=True):
                url = snapshot(path, Path(scratch))
                graded[judged.run] = (url, graded_run(judged, url, path, by_name))
            copied = copy_examples(list(zip(runs, urls, strict=True)), graded, partial)
        finally:
            storage.reset_engines()  # every connection closed: the target's write-ahead log folded into the file
    with sqlite3.connect(partial) as connection:
        connection.execute("PRAGMA journal_mode = DELETE")
    connection = sqlite3.connect(partial)
    connection.execute("VACUUM")
    connection.close()
    os.replace(partial, out)
    return copied


def copy_examples(
    sources: list[tuple[StoredRun, str]], graded: dict[str, tuple[str, StoredRun]], partial: Path
) -> list[tuple[str, int, bool, CopiedJudgements | None]]:
    """Copy each (run, its database's URL) into a fresh file ``partial``, in EXAMPLES' order, and the judge's
    results of each run ``graded`` names onto its copy."""
    for leftover in (partial, *(partial.with_name(partial.name + suffix) for suffix in ("-wal", "-shm"))):
        leftover.unlink(missing_ok=True)
    target = f"sqlite:///{partial.resolve()}"
    copied = []
    for example, (run, url) in reversed(list(zip(EXAMPLES, sources, strict=True))):  # listed newest first
        run_id = copy_run(run.id, source=url, target=target, cell_stats=None if example.traces else without_trace)
        judgements = None
        if example.name in graded:
            graded_url, graded_source = graded[example.name]
            judgements = copy_judgements(graded_source.id, run_id, source=graded_url, target=target)
        copied.append((example.name, run.cell_count, example.traces, judgements))
    return copied[::-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="folder", default="results", help="the source databases' folder")
    parser.add_argument("--out", default=str(EXAMPLE_RUNS_DB), help="the file to write")
    args = parser.parse_args(argv)
    out = Path(args.out)
    for name, cells, traces, judgements in build(Path(args.folder), out):
        judged = f", {judgements.scores} judge grades, {judgements.verdicts} verdicts" if judgements else ""
        print(f"{name}: {cells} cells{', with traces' if traces else ''}{judged}")
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
