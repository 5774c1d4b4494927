"""Why the history-crossing audit counts 3-word runs and 2-word names (``specsteer.data.crossing``).

    .venv/bin/python scripts/crossing_phrase_study.py

Each record's reference output stands for a personalised output. For each rule it prints, per output, the
mean number of phrases found and the share of outputs with any:

* against the record's own history (its items and profile, minus its input): what the rule finds when an
  output draws on the history;
* against another user's history (a record of another user, drawn with a fixed seed, minus this input):
  what chance and common language give, the false alarms.

The rules: the audit's own (``PhraseIndex``), and for contrast every run of 2, 3 or 4 words. Records: the
CoGenesis dev and test splits in the shared data folder (where present) and the bundled LongLaMP-schema
samples. Last, the phrases the audit finds in the default persona's reference output.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specsteer.data.crossing import PhraseIndex, history_texts, phrase_key  # noqa: E402
from specsteer.data.datasets import LONGLAMP_TASKS, Record, load_cogenesis, load_records  # noqa: E402
from specsteer.data.history import persona_history  # noqa: E402
from specsteer.data.sources import DEFAULT_SAMPLE, SAMPLE_USERS, SAMPLES_DIR, bundled_sample_path, shared_cogenesis_path  # noqa: E402

Finder = Callable[[Sequence[str], str, str], list[str]]  # (history texts, input, output) -> phrases found


def audit_rule(history: Sequence[str], task: str, output: str) -> list[str]:
    return [output[start:end] for start, end in PhraseIndex.build(history, [task]).find(output)]


def every_run(size: int) -> Finder:
    def grams(text: str) -> set[tuple[str, ...]]:
        keys = phrase_key(text)
        return {tuple(keys[i : i + size]) for i in range(len(keys) - size + 1)}

    def find(history: Sequence[str], task: str, output: str) -> list[str]:
        private = set().union(*(grams(text) for text in history))
        return [" ".join(gram) for gram in (grams(output) & private) - grams(task)]

    return find


RULES: dict[str, Finder] = {
    "audit rule (3 words, 2 content; 2-word names)": audit_rule,
    "every 2-word run": every_run(2),
    "every 3-word run": every_run(3),
    "every 4-word run": every_run(4),
}


def study(label: str, records: Sequence[Record]) -> None:
    users = [record.user_id or record.id for record in records]
    print(f"\n{label}: {len(records)} records; per output: mean phrases (share with any)")
    print(f"{'rule':<48} {'own history':>14} {'another user':>14}")
    for name, finder in RULES.items():
        chooser = random.Random(0)
        own, other = [], []
        for record, user in zip(records, users, strict=True):
            own.append(len(finder(history_texts(record.profile, record.user_profile), record.input, record.output)))
            stranger = records[chooser.choice([i for i, u in enumerate(users) if u != user])]
            stranger_history = history_texts(stranger.profile, stranger.user_profile)
            other.append(len(finder(stranger_history, record.input, record.output)))
        print(f"{name:<48} {_cell(own):>14} {_cell(other):>14}")


def _cell(counts: Sequence[int]) -> str:
    return f"{statistics.fmean(counts):.2f} ({sum(c > 0 for c in counts) / len(counts):.0%})"


def main() -> None:
    cogenesis = [path for split in ("dev", "test") if (path := shared_cogenesis_path(split)) is not None]
    if cogenesis:
        study("CoGenesis dev + test", [record for path in cogenesis for record in load_cogenesis(path)])
    samples = [record for task in LONGLAMP_TASKS for record in load_records(bundled_sample_path(task), task)]
    study("bundled LongLaMP-schema samples", samples)
    sample = json.loads((SAMPLES_DIR / SAMPLE_USERS[DEFAULT_SAMPLE].file).read_text())
    persona = persona_history(sample)
    task, output = (turn["value"] for turn in sample["conversations"][:2])
    found = audit_rule(history_texts(persona.items, persona.profile), task, output)
    print(f"\nthe default persona ({SAMPLE_USERS[DEFAULT_SAMPLE].file}), its reference output: {found}")


if __name__ == "__main__":
    main()
