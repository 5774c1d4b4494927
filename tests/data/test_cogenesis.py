"""The CoGenesis task: the loader, persona histories, the sectioned prompt, llm+ and its audit."""

from __future__ import annotations

import json

import pytest

from specsteer.data.datasets import load_cogenesis
from specsteer.data.history import HistoryError
from specsteer.data.history_upload import parse_history
from specsteer.data.privacy import audit_uplink
from specsteer.data.record_files import DataError
from specsteer.data.sources import resolve_data_source, shared_cogenesis_path
from specsteer.data.tasks import build_prompts
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, chat_ids, prepare
from specsteer.method.catalog import METHOD_INFO
from specsteer.models.tiny import tiny_pair

PROFILE = (
    "Age: 33\nName: Ada Park\nOccupation: Florist\n"
    "Privacy_info: Is saving money to open a second shop in Lisbon; Takes cello lessons every Tuesday"
)


def record(tid: str, task: str = "Write a short note to customers about spring bouquets.") -> dict:
    return {
        "tid": tid,
        "conversations": [{"from": "user", "value": task}, {"from": "assistant", "value": "Spring is here."}],
        "profile": [
            {"title": "Tulips", "text": "Tulips open wide in a warm room, so buy them closed.", "id": 0},
            {"title": "Peonies", "text": "Peonies smell best in the morning.", "id": 1},
        ],
        "additional_profile": PROFILE,
        "additional_tasks": [],
    }


def write(tmp_path, records) -> str:
    path = tmp_path / "cogenesis_tiny.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return str(path)


def test_records_carry_task_reference_texts_profile_and_private_facts(tmp_path):
    (loaded,) = load_cogenesis(write(tmp_path, [record("1_2_3")]))
    assert loaded.id == "1_2_3" and loaded.task == "cogenesis" and loaded.user_id == "Ada Park"
    assert loaded.input.startswith("Write a short note") and loaded.output == "Spring is here."
    assert [item.fields["title"] for item in loaded.profile] == ["Tulips", "Peonies"]
    assert loaded.user_profile == PROFILE
    assert loaded.private_facts == (
        "Is saving money to open a second shop in Lisbon",
        "Takes cello lessons every Tuesday",
    )


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda r: r.pop("additional_profile"), "additional_profile"),
        (lambda r: r.update(additional_profile="Age: 3"), "Privacy_info"),
        (lambda r: r.update(conversations=[{"from": "user", "value": "x"}]), "conversations"),
        (lambda r: r["profile"].append({"title": "a list", "text": ["not", "text"]}), "record 1"),
    ],
)
def test_a_damaged_record_is_named(tmp_path, damage, message):
    raw = record("9")
    damage(raw)
    with pytest.raises(DataError, match=message):
        load_cogenesis(write(tmp_path, [raw]))


def test_the_published_splits_load_whole():
    dev, test = shared_cogenesis_path("dev"), shared_cogenesis_path("test")
    if dev is None or test is None:
        pytest.skip("the shared CoGenesis records are not here")
    dev_records, test_records = load_cogenesis(dev), load_cogenesis(test)
    assert (len(dev_records), len(test_records)) == (150, 120)
    assert all(len(r.profile) == 4 and 5 <= len(r.private_facts) <= 10 for r in dev_records + test_records)
    assert resolve_data_source("shared:dev", "cogenesis") == str(dev)
    assert resolve_data_source("shared", "cogenesis") == str(test)


def test_a_persona_upload_is_its_texts_and_its_profile():
    history = parse_history(json.dumps(record("5")).encode(), filename="persona.json")
    assert history.schema == "cogenesis" and history.profile == PROFILE and len(history) == 2
    with pytest.raises(HistoryError, match="additional_profile"):
        parse_history(json.dumps(record("5") | {"additional_profile": ""}).encode(), filename="persona.json")


@pytest.mark.parametrize("style", ["paper", "clean"])
def test_the_specialist_reads_profile_then_history_then_task_and_the_cloud_the_task_alone(tmp_path, style):
    (loaded,) = load_cogenesis(write(tmp_path, [record("1")]))
    prepared = prepare(
        Request(
            task="cogenesis",
            input_text=loaded.input,
            history=loaded.profile,
            retrieval_k=2,
            prompt_style=style,
            profile=loaded.user_profile,
        )
    )
    plain, private = prepared.prompts.plain, prepared.prompts.private
    assert plain.startswith(loaded.input) and "Privacy_info" not in plain and "Tulips open" not in plain
    assert (style == "clean") == ("Write only the text" in plain)
    profile_at, history_at, task_at = (private.index(part) for part in ("Privacy_info", "Tulips open", "## The task"))
    assert profile_at < history_at < task_at
    assert private.endswith(plain)
    assert ("Title: Tulips" in private) == (style == "paper")  # the clean style shows no titles to copy


def test_a_profile_needs_the_cogenesis_task():
    with pytest.raises(ValueError, match="cogenesis"):
        build_prompts("free", "Write a note.", [], profile=PROFILE)
    assert build_prompts("cogenesis", "Write a note.", []).private == "Write a note."


def test_llm_plus_sends_the_whole_private_prompt_and_its_audit_says_so(tmp_path):
    assert METHOD_INFO["llm+"].sends_private_context and not METHOD_INFO["llm"].sends_private_context
    assert "sends" in METHOD_INFO["llm+"].label.lower()
    pair = tiny_pair(seed=0, generalist_seed=1)
    (loaded,) = load_cogenesis(write(tmp_path, [record("1")]))
    prepared = prepare(
        Request(
            task="cogenesis",
            input_text=loaded.input,
            history=loaded.profile,
            profile=loaded.user_profile,
            prompt_style="clean",
        )
    )
    plain_ids = chat_ids(pair.tokenizer, prepared.prompts.plain, pair.chat)
    private_ids = chat_ids(pair.tokenizer, prepared.prompts.private, pair.chat)
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(method="llm+", max_new_tokens=8)))
    (opening,) = [m for m in finished.transcript if m.direction == "uplink"]
    assert list(opening.payload["prompt"]) == private_ids
    audit = audit_uplink(finished.transcript, plain_ids, tokens, private_prompt_ids=private_ids)
    assert audit.ok and audit.private_prompt_sent
    assert "whole private prompt" in audit.summary()
    # The same transcript audited as a private method is a leak.
    assert not audit_uplink(finished.transcript, plain_ids, tokens).ok
    # llm sends the plain prompt: its audit holds with the private prompt withheld.
    tokens, finished = collect(generate(pair, prepared, DecodeConfig(method="llm", max_new_tokens=8)))
    plain_audit = audit_uplink(finished.transcript, plain_ids, tokens)
    assert plain_audit.ok and not plain_audit.private_prompt_sent and finished.stats.sent_text == ""


def test_an_evaluation_run_reports_private_facts_per_method_and_the_dashboard_rebuilds_them(tmp_path, url):
    import storage
    from specsteer.evaluation.grid import EvalSpec, run_grid
    from specsteer.service import evaluation_runs

    data = write(tmp_path, [record("1"), record("2", task="Tell my customers about peonies.")])
    spec = EvalSpec(
        data=data,
        task="cogenesis",
        methods=("slm", "llm", "llm+", "specsteer"),
        alphas=(0.1,),
        max_new_tokens=4,
        prompt_style="clean",
        run_name="cogenesis-tiny",
    )
    result = run_grid(spec, storage.SqlRunStore(url), pair=tiny_pair(seed=0, generalist_seed=1))
    rows = {row["method"]: row for row in result.rows}
    assert rows["llm+"]["facts_sent"] == 1.0  # the private prompt holds the Privacy_info line itself
    assert rows["slm"]["facts_sent"] == 0.0 and rows["llm"]["facts_sent"] == 0.0  # neither task names a fact
    assert set(rows["specsteer"]) >= {"facts_sent", "facts_sent_beyond_task", "facts_in_output", "facts_rejected_only"}
    assert all(cell.stats.sent_text for cell in result.cells if cell.point.method == "specsteer")
    run = storage.get_run_by_name("cogenesis-tiny", url=url)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DATABASE_URL", url)
        stored = {row["method"]: row for row in evaluation_runs.stored_rows(run.config, storage.run_cells(run.id))}
        notes = evaluation_runs.claim_notes(storage.run_cells(run.id))
    assert stored["llm+"]["facts_sent"] == 1.0 and stored["specsteer"]["facts_sent"] == rows["specsteer"]["facts_sent"]
    # LLM is the only baseline in this run: a count line, then the one setting against it with its interval.
    assert len(notes) == 2 and notes[0].startswith("SpecSteer − LLM on R-L")
    assert notes[1].startswith("SpecSteer α=0.1 β=1 − LLM: R-L ") and "/2 better, 95 % bootstrap)" in notes[1]
