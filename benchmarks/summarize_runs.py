"""Markdown tables of stored evaluation runs, for the README.

    .venv/bin/python benchmarks/summarize_runs.py sqlite:///$PWD/results/longlamp.db RUN [RUN ...] [--common]

Rows average over the records on which every cell of the run is stored, so a run that is still
going (or was stopped) compares like with like. Columns: ROUGE (0-100), acceptance, end-to-end
tok/s and its ratio to LLM, the same for the decoding phase only (prompt processing left out: the
fair comparison where the runtime reuses a record's prompts between methods), and output hygiene:
the share of outputs copying the prompt's item layout, opening with a preamble, or refusing
(``specsteer.data.hygiene``; the prompts are rebuilt from the run's records, no model is loaded).
Below each table, every SpecSteer setting is compared with SLM+ and LLM record by record on
ROUGE-L: records won, the mean difference and its 95 % bootstrap interval [low, high] (a dozen
records make a small sample), then the claims those intervals support on ROUGE-L and ROUGE-1
(``specsteer.evaluation.claims``, the sentences the Dashboard and ``specsteer evaluate`` print: higher,
lower or not established on these records, against each baseline). A CoGenesis run also gets the privacy table: per method,
the share of the records' private facts sent to the cloud (all of them, and those the task did not
name), found in the output, and sent only in rejected drafts (``specsteer.data.facts``). A run whose cells were
audited for the history that crossed (``specsteer.data.crossing``) gets its table too: per method, the share of
generations where a phrase of the history crossed to the cloud, and the phrases per generation.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import storage  # noqa: E402
from specsteer.evaluation import grid as evaluate  # noqa: E402
from specsteer.evaluation.claims import claim_sentences, claims, steered_points  # noqa: E402
from specsteer.evaluation.sweep import complete_records  # noqa: E402
from specsteer.method.catalog import BASELINES, method_label  # noqa: E402
from specsteer.models.runtime_plan import StoredPlan  # noqa: E402
from specsteer.stores.runs import CellResult  # noqa: E402


def _value(value, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def _share(value) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _markdown_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _setting_cells(row: dict) -> list[str]:
    """A row's first columns: its method, α and β."""
    return [method_label(row["method"]), _value(row["alpha"], "{:g}"), _value(row["beta"], "{:g}")]


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| method | α | β | R-1 | R-L | R-1 stem | R-L stem | acceptance | tok/s | vs llm | decode tok/s "
        "| decode vs llm | mean tokens | layout copied | preamble | refusal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            _markdown_row(
                [
                    *_setting_cells(row),
                    f"{row['rouge1']:.2f}",
                    f"{row['rougeL']:.2f}",
                    f"{row['rouge1_stemmed']:.2f}",
                    f"{row['rougeL_stemmed']:.2f}",
                    _value(row["acceptance"] and 100 * row["acceptance"], "{:.0f}%"),
                    _value(row["tok_per_s"], "{:.2f}"),
                    _value(row["speedup"], "{:.2f}×"),
                    _value(row["decode_tok_per_s"], "{:.2f}"),
                    _value(row["decode_speedup"], "{:.2f}×"),
                    f"{row['new_tokens']:.0f}",
                    _share(row.get("layout_copy")),
                    _share(row.get("preamble")),
                    _share(row.get("refusal")),
                ]
            )
        )
    return lines


def privacy_table(rows: list[dict]) -> list[str]:
    lines = [
        (
            "| method | α | β | facts sent to the cloud | sent, not named in the task | in the output "
            "| sent only in rejected drafts |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        facts = ("facts_sent", "facts_sent_beyond_task", "facts_in_output", "facts_rejected_only")
        lines.append(_markdown_row([*_setting_cells(row), *(_share(row.get(name)) for name in facts)]))
    return lines


def crossing_table(rows: list[dict]) -> list[str]:
    lines = ["| method | α | β | history crossed | phrases per generation |", "|---|---|---|---|---|"]
    for row in rows:
        crossed = [_share(row.get("history_crossed")), _value(row.get("history_phrases"), "{:.1f}")]
        lines.append(_markdown_row([*_setting_cells(row), *crossed]))
    return lines


def claims_table(cells: list[CellResult], baselines: list[str]) -> list[str]:
    """Each SpecSteer setting against each baseline on ROUGE-L, record by record (claims.claims' numbers:
    records won, the mean difference (0-100) and its 95 % bootstrap interval), and the verdict."""
    found = {(claim.difference.ours, claim.difference.theirs.method): claim for claim in claims(cells)}
    lines = [
        _markdown_row(["SpecSteer R-L, record by record", *(f"vs {method_label(b)}" for b in baselines)]),
        "|---|" + "---|" * len(baselines),
    ]
    for point in steered_points(cells):
        found_here = [found.get((point, baseline)) for baseline in baselines]
        verdicts = ["–" if c is None else f"{c.difference.describe()}: {c.verdict}" for c in found_here]
        lines.append(_markdown_row([f"α={point.alpha:g} β={point.beta:g}", *verdicts]))
    return lines


def main(url: str, names: list[str], common: bool = False) -> None:
    """``common``: every run keeps only the records complete in all the named runs (to compare runs)."""
    missing = storage.missing_sqlite_file(url)
    if missing:
        raise SystemExit(f"no database file at {missing}")
    url = storage.read_only_url(url)  # only read: never changes the file (the example runs among them)
    shared: set[str] | None = None
    if common:
        for name in names:
            run = storage.get_run_by_name(name, url=url)
            done = set(complete_records(storage.run_cells(run.id, url=url))) if run is not None else set()
            shared = done if shared is None else shared & done
    for name in names:
        run = storage.get_run_by_name(name, url=url)
        if run is None:
            raise SystemExit(f"no run named {name!r} in {url}")
        cells = storage.run_cells(run.id, url=url)
        records = [record for record in complete_records(cells) if shared is None or record in shared]
        kept = [cell for cell in cells if cell.record_id in records]
        facts = evaluate.run_facts(run.config) if run.config["task"] == "cogenesis" else None
        rows = evaluate.summarize(kept, run.config["task"], evaluate.run_prompts(run.config), facts)
        plan = StoredPlan.read(run.config)  # runs made before the runtime choice used transformers
        precision = run.config.get("dtype") or ("Q4_K_M" if plan.runtime == "llama.cpp" else "?")
        style = run.config.get("prompt_style", "paper")
        print(
            f"**{name}** ({run.status}; {plan.runtime}, {precision}, {style} prompts): {len(records)} records "
            f"complete, {len(cells)} cells stored\n"
        )
        if plan.reason or plan.mixed:
            print(f"Runtime: {plan.describe()}\n")
        print("\n".join(table(rows)) + "\n")
        if facts is not None:
            print("\n".join(privacy_table(rows)) + "\n")
        if any("history_crossed" in row for row in rows):
            print("\n".join(crossing_table(rows)) + "\n")
        baselines = [b for b in BASELINES if any(row["method"] == b for row in rows)]
        if not steered_points(kept) or not baselines:
            continue
        print("\n".join(claims_table(kept, baselines)) + "\n")
        for sentence in claim_sentences(kept, ("rougeL", "rouge1")):
            print(f"- {sentence}")
        print()


if __name__ == "__main__":
    arguments = [argument for argument in sys.argv[1:] if argument != "--common"]
    if len(arguments) < 2:
        raise SystemExit(__doc__)
    main(arguments[0], arguments[1:], common="--common" in sys.argv)
