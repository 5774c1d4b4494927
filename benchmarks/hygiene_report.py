"""Output hygiene of stored evaluation runs, as Markdown tables.

    .venv/bin/python benchmarks/hygiene_report.py sqlite:///$PWD/results/longlamp.db [RUN ...] [--evidence]

For each run (all runs when none is named), one row per (method, α, β): how many outputs there are
and the share that copy the prompt's item layout, open with a preamble, or refuse
(``specsteer.data.hygiene``; "any" is the share with at least one of the three). With several runs, the
same table over all of them follows; last, one row per method with its α and β pooled.

Prompts. The layout check needs the request's prompts (was any item shown; does the request itself
write a field label), so they are rebuilt from the records as the run built them
(``evaluate.run_prompts``: the run's stored config, BM25 retrieval, noise items, prompt style).
Cells name their record by ``record_id``. ``--data-dir DIR`` looks for the stored file name in DIR
when the stored path is gone (a moved checkout).

Read-only: a SQLite file is opened with ``mode=ro``; any other database is only sent SELECTs, and
the connection closes without a commit. Nothing here loads a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import Connection, create_engine, text  # noqa: E402

import storage  # noqa: E402
from specsteer.data.hygiene import GridVerdict, HygieneShares, classify_output, hygiene_shares  # noqa: E402
from specsteer.data.record_files import DataError  # noqa: E402
from specsteer.data.tasks import DEFAULT_PROMPT_STYLE  # noqa: E402
from specsteer.evaluation.grid import run_prompts  # noqa: E402


@dataclass(frozen=True)
class StoredRun:
    id: int
    name: str
    status: str
    config: dict[str, Any]

    @property
    def task(self) -> str:
        return self.config["task"]

    @property
    def prompt_style(self) -> str:
        return self.config.get("prompt_style", DEFAULT_PROMPT_STYLE)


@dataclass(frozen=True)
class StoredCell:
    record_id: str
    method: str
    alpha: float | None
    beta: float | None
    output: str


@dataclass(frozen=True)
class ClassifiedRun:
    run: StoredRun
    cells: tuple[StoredCell, ...]
    verdicts: tuple[GridVerdict, ...]  # one per cell, same order


# --------------------------------------------------------------------------- reading, read-only


def load_runs(connection: Connection, names: Sequence[str]) -> list[StoredRun]:
    rows = connection.execute(text("SELECT id, name, status, config FROM eval_runs ORDER BY id")).all()
    runs = [StoredRun(row.id, row.name, row.status, _json(row.config)) for row in rows]
    if not names:
        return runs
    by_name = {run.name: run for run in runs}
    missing = [name for name in names if name not in by_name]
    if missing:
        raise ValueError(f"no stored run named {', '.join(map(repr, missing))}; stored: {', '.join(by_name) or 'none'}")
    return [by_name[name] for name in names]


def load_cells(connection: Connection, run: StoredRun) -> list[StoredCell]:
    rows = connection.execute(
        text("SELECT record_id, method, alpha, beta, output FROM eval_cells WHERE run_id = :run ORDER BY id"),
        {"run": run.id},
    ).all()
    return [StoredCell(row.record_id, row.method, row.alpha, row.beta, row.output) for row in rows]


def _json(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value)


# --------------------------------------------------------------------------- prompts and verdicts


def classify_run(run: StoredRun, cells: Sequence[StoredCell], data_dir: Path | None) -> ClassifiedRun:
    prompts = run_prompts(run.config, data_dir) if cells else {}
    missing = sorted({cell.record_id for cell in cells} - set(prompts))
    if missing:
        raise DataError(f"run {run.name!r}: records {', '.join(missing)} are not in {run.config['data']}")
    verdicts = tuple(
        GridVerdict(cell.method, cell.alpha, cell.beta, classify_output(cell.output, run.task, prompts[cell.record_id]))
        for cell in cells
    )
    return ClassifiedRun(run, tuple(cells), verdicts)


def pooled_by_method(verdicts: Iterable[GridVerdict]) -> list[HygieneShares]:
    return hygiene_shares(GridVerdict(item.method, None, None, item.verdict) for item in verdicts)


# --------------------------------------------------------------------------- Markdown


def shares_table(rows: Sequence[HygieneShares], with_grid: bool = True) -> list[str]:
    head = ["method", *(["α", "β"] if with_grid else []), "outputs", "layout copy", "preamble", "refusal", "any"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        grid = [_number(row.alpha), _number(row.beta)] if with_grid else []
        counts = [row.layout_copies, row.preambles, row.refusals, row.flagged]
        lines.append(
            "| "
            + " | ".join([row.method, *grid, str(row.outputs), *(_share(count, row.outputs) for count in counts)])
            + " |"
        )
    return lines


def evidence_lines(classified: ClassifiedRun) -> list[str]:
    lines = []
    pairs = zip(classified.cells, classified.verdicts, strict=True)
    # Record by record ("2" before "10"), in grid order within a record.
    for cell, item in sorted(pairs, key=lambda pair: (len(pair[0].record_id), pair[0].record_id)):
        verdict = item.verdict
        found = [
            f"{name} `{evidence}`"
            for name, evidence in (
                ("layout", verdict.layout_evidence),
                ("preamble", verdict.preamble_evidence),
                ("refusal", verdict.refusal_evidence),
            )
            if evidence
        ]
        if found:
            parameters = [
                f"{name}={value:g}" for name, value in (("α", cell.alpha), ("β", cell.beta)) if value is not None
            ]
            point = " ".join([cell.method, *parameters])
            lines.append(f"- record {cell.record_id}, {point}: {'; '.join(found)}")
    return lines


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def _share(count: int, total: int) -> str:
    return f"{100 * count / total:.0f}% ({count})"


def report(classified_runs: Sequence[ClassifiedRun], with_evidence: bool) -> str:
    lines: list[str] = []
    for classified in classified_runs:
        run = classified.run
        lines += [
            f"**{run.name}** ({run.status}; {run.task}, {run.prompt_style} prompts, {len(classified.cells)} outputs)",
            "",
        ]
        lines += shares_table(hygiene_shares(classified.verdicts)) if classified.cells else ["(no stored cells)"]
        if with_evidence:
            lines += ["", *evidence_lines(classified)]
        lines.append("")
    every = [item for classified in classified_runs for item in classified.verdicts]
    if len(classified_runs) > 1:
        lines += [
            f"**All {len(classified_runs)} runs** ({len(every)} outputs)",
            "",
            *shares_table(hygiene_shares(every)),
            "",
        ]
    if every:
        lines += ["**Per method, α and β pooled**", "", *shares_table(pooled_by_method(every), with_grid=False), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("database", help="database URL, e.g. sqlite:///$PWD/results/longlamp.db")
    parser.add_argument("runs", nargs="*", help="run names (default: every stored run)")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="folder holding the records files when their stored paths are gone"
    )
    parser.add_argument("--evidence", action="store_true", help="list every flagged output with what matched")
    args = parser.parse_args(argv)
    try:
        missing = storage.missing_sqlite_file(args.database)
        if missing:
            raise ValueError(f"no database file at {missing}")
        engine = create_engine(storage.read_only_url(args.database))
        with engine.connect() as connection:  # closed without a commit
            runs = load_runs(connection, args.runs)
            stored = [(run, load_cells(connection, run)) for run in runs]
        engine.dispose()
        classified = [classify_run(run, cells, args.data_dir) for run, cells in stored]
    except ValueError as error:  # DataError is a ValueError
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(report(classified, args.evidence))
    return 0


if __name__ == "__main__":
    sys.exit(main())
