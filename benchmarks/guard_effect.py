"""The private-span guard's effect: one SpecSteer setting without and with the guard, record by record.

    .venv/bin/python benchmarks/guard_effect.py sqlite:///$PWD/results/cogenesis.db RUN GUARD_RUN ALPHA BETA

RUN holds the setting unguarded (among other cells), GUARD_RUN the same setting with
``--private-guard N``; both are CoGenesis runs over the same records file. On the records both have,
it prints ROUGE-L and ROUGE-1 (guarded minus unguarded, with 95 % bootstrap intervals), acceptance,
and the private facts sent to the cloud, sent beyond the task, and sent only in rejected drafts
(``specsteer.data.facts``), pooled, with the records where the guard sent fewer or more facts.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import storage  # noqa: E402
from specsteer.data.facts import fact_shares, method_exposure  # noqa: E402
from specsteer.evaluation import grid as evaluate  # noqa: E402
from specsteer.stores.runs import CellResult, GridPoint  # noqa: E402

GUARDED = GridPoint("specsteer-guarded")  # the guarded cells' point here, so that the two can be paired


def main(url: str, plain_name: str, guard_name: str, alpha: float, beta: float) -> None:
    missing = storage.missing_sqlite_file(url)
    if missing:
        raise SystemExit(f"no database file at {missing}")
    url = storage.read_only_url(url)  # only read: never changes the file (the example runs among them)
    point = GridPoint("specsteer", alpha, beta)
    runs = [storage.get_run_by_name(name, url=url) for name in (plain_name, guard_name)]
    plain, guarded = (
        {cell.record_id: cell for cell in storage.run_cells(run.id, url=url) if cell.point == point} for run in runs
    )
    records = sorted(set(plain) & set(guarded))
    prompts, facts = evaluate.run_prompts(runs[0].config), evaluate.run_facts(runs[0].config)
    cells = [plain[record] for record in records] + [
        CellResult(record, GUARDED, guarded[record].output, guarded[record].rouge, guarded[record].stats)
        for record in records
    ]
    print(
        f"{len(records)} records, SpecSteer α={alpha:g} β={beta:g}; guard: run {guard_name!r} "
        f"(n = {runs[1].config.get('private_guard')})"
    )
    for metric in ("rougeL", "rouge1"):
        print(f"- {metric} guarded − unguarded: {evaluate.paired_difference(cells, GUARDED, point, metric).describe()}")
    for label, chosen in (("unguarded", plain), ("guarded", guarded)):
        stats = [chosen[record].stats for record in records]
        exposures = [
            method_exposure(
                "specsteer", facts[record], prompts[record], chosen[record].stats.sent_text, chosen[record].output
            )
            for record in records
        ]
        shares = fact_shares(exposures)
        print(
            f"- {label}: acceptance {sum(s.accepted for s in stats) / sum(s.drafted for s in stats):.0%}, "
            f"facts sent {shares.sent:.1%} ({sum(sum(e.sent) for e in exposures)} of {shares.facts}), beyond "
            f"the task {shares.sent_beyond_task:.1%}, only in rejected drafts {shares.rejected_only:.1%}, "
            f"in the output {shares.in_output:.1%}"
        )
    fewer = more = 0
    for record in records:
        counts = [
            sum(
                method_exposure(
                    "specsteer", facts[record], prompts[record], chosen[record].stats.sent_text, chosen[record].output
                ).sent
            )
            for chosen in (plain, guarded)
        ]
        fewer += counts[1] < counts[0]
        more += counts[1] > counts[0]
    print(
        f"- records where the guard sent fewer facts: {fewer}; more: {more}; "
        f"outputs changed by the guard: {sum(plain[r].output != guarded[r].output for r in records)}"
    )


if __name__ == "__main__":
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
