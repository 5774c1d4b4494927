"""Where records and sample users are found: the bundled samples (assets/samples), the shared data folder,
and a source name (``sample``, ``shared``, a path) resolved to a records file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from specsteer.data.datasets import COGENESIS_SPLITS, COGENESIS_TASK, LONGLAMP_TASKS
from specsteer.data.record_files import DataError

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO_ROOT / "assets" / "samples"
# Evaluation runs the docs cite, read-only beside the user's own in the app's Dashboard and the default traces of
# `specsteer gpu-profile` (built by benchmarks/build_example_runs.py).
EXAMPLE_RUNS_DB = REPO_ROOT / "assets" / "example_runs.db"


@dataclass(frozen=True)
class SampleUser:
    """A bundled synthetic user (assets/samples): the history file and an input that suits it."""

    file: str
    label: str  # how the app's sample picker names the user
    input_text: str


# The one catalogue of sample users. The first four are CoGenesis personas from the dev split (records as
# published: a profile and four texts, private; the input is the record's task).
SAMPLE_USERS: dict[str, SampleUser] = {
    'persona-hr': SampleUser(
        'persona_hr_manager.json',
        'Gregory, HR manager (persona, CoGenesis)',
        'Write an article on balancing work and family life: Share personal insights and professional advice on how working remotely on Fridays has improved your work-life balance and family relationships.',
    ),
    'persona-principal': SampleUser(
        'persona_retired_principal.json',
        'Martha, retired school principal (persona, CoGenesis)',
        'Heirloom Tomato Article: Prepare an informative article for your gardening club, detailing the process of cultivating heirloom tomatoes, your personal tips, and the emotional significance of this tradition.',
    ),
    'persona-developer': SampleUser(
        'persona_software_developer.json',
        'Ava, software developer (persona, CoGenesis)',
        'Write a Spanish language learning article: She can share her experience learning Spanish, the apps she uses, methodologies, study routine, and how it might help in her professional life, possibly for internal cultural diversification materials.',
    ),
    'persona-gamedev': SampleUser(
        'persona_game_developer.json',
        'Alex, indie game developer (persona, CoGenesis)',
        'Creative Patch Notes: Craft creative patch notes for your latest game update.',
    ),
    'review': SampleUser(
        'review_user.jsonl',
        'Gadget reviewer (review, JSONL)',
        'Generate the review text written by a reviewer who has given an overall rating of "5.0" for a product with description "Portable power bank, 20000 mAh, two USB-C ports, 65 W fast charging.". The summary of the review text is "Charges my laptop twice!".',
    ),
    'writing': SampleUser(
        'writing_user.json',
        'Home baker (writing, JSON)',
        'Generate the content for a reddit post first time making croissants',
    ),
    'abstract': SampleUser(
        'abstract_user.csv',
        'Sensor-network researcher (abstract, CSV)',
        'Generate an abstract for the title "Detecting Faulty Soil Sensors from Neighbour Agreement" using the following items: 1. sensor faults 2. spatial correlation 3. fault detection accuracy',
    ),
    'plain': SampleUser(
        'plain_user.txt',
        'Hiking club organiser (plain text)',
        "Write a short message to the club announcing Sunday's lake walk and what to bring.",
    ),
}
DEFAULT_SAMPLE = "persona-hr"
SHARED_DATA_ENV = "SPECSTEER_SHARED_DATA"


def bundled_sample_path(task: str) -> Path:
    """The small synthetic LongLaMP-schema dataset shipped in assets/samples/."""
    if task not in LONGLAMP_TASKS:
        raise ValueError(f"no bundled sample for task {task!r}; choose one of {', '.join(LONGLAMP_TASKS)}")
    return SAMPLES_DIR / f"longlamp_sample_{task}.jsonl"


def sample_history_path(schema: str) -> Path:
    """A synthetic sample history upload of the given schema."""
    if schema not in SAMPLE_USERS:
        raise ValueError(f"no sample history for schema {schema!r}; choose one of {', '.join(SAMPLE_USERS)}")
    return SAMPLES_DIR / SAMPLE_USERS[schema].file


def shared_data_path(task: str) -> Path | None:
    """The real LongLaMP records of ``task`` in the shared data folder, if present.

    Looked for in ``$SPECSTEER_SHARED_DATA`` (the folder holding the files, or
    its parent holding ``longlamp/``), then in ``../shared/data/longlamp/``
    beside the repository.
    """
    if task not in LONGLAMP_TASKS:
        raise ValueError(f"unknown LongLaMP task {task!r}; choose one of {', '.join(LONGLAMP_TASKS)}")
    return _shared_file("longlamp", f"longlamp_{task}.jsonl")


def shared_cogenesis_path(split: str = "test") -> Path | None:
    """The CoGenesis records of ``split`` (dev or test) in the shared data folder, if present
    (``$SPECSTEER_SHARED_DATA``, the folder or its parent holding ``cogenesis/``, then
    ``../shared/data/cogenesis/``)."""
    if split not in COGENESIS_SPLITS:
        raise ValueError(f"unknown CoGenesis split {split!r}; choose one of {', '.join(COGENESIS_SPLITS)}")
    return _shared_file("cogenesis", f"cogenesis_{split}.json")


def _shared_file(dataset: str, name: str) -> Path | None:
    """``name`` in ``$SPECSTEER_SHARED_DATA`` (the dataset's folder or its parent), then in
    ``../shared/data/<dataset>/`` beside the repository; None where it is in neither."""
    folders = []
    if os.environ.get(SHARED_DATA_ENV):
        configured = Path(os.environ[SHARED_DATA_ENV])
        folders += [configured, configured / dataset]
    folders.append(REPO_ROOT.parent / "shared" / "data" / dataset)
    for folder in folders:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def resolve_data_source(source: str, task: str) -> str:
    """A records file from a source name: ``sample`` (bundled), ``shared`` (the real records) or a path.

    For ``cogenesis``, ``shared`` is the test split and ``shared:dev`` the dev split; there is no
    bundled sample dataset (the bundled personas are app sample users)."""
    if task == COGENESIS_TASK and source in ("shared", "shared:dev", "shared:test"):
        split = source.partition(":")[2] or "test"
        found = shared_cogenesis_path(split)
        if found is None:
            raise DataError(f"no CoGenesis {split} records here (../shared/data/cogenesis/ or $SPECSTEER_SHARED_DATA)")
        return str(found)
    if source == "sample":
        return str(bundled_sample_path(task))
    if source == "shared":
        found = shared_data_path(task)
        if found is None:
            raise DataError(
                f"no real LongLaMP records for the {task} task here (../shared/data/longlamp/ or "
                "$SPECSTEER_SHARED_DATA); use the bundled sample or another file"
            )
        return str(found)
    return source
