"""Per-record LoRA Specialists in the evaluation grid (paper A.2 on CoGenesis): each record's adapter trained on
its own texts only, once, read back on resume, merged into the Edge's Specialist only; tiny fp32 models."""

from __future__ import annotations

import gc
import json
import os
import threading
import weakref
from dataclasses import replace

import pytest
from evaluation.test_evaluate import MemoryStore

import storage
from specsteer.data.datasets import load_cogenesis
from specsteer.data.sources import shared_cogenesis_path
from specsteer.edge.lora import LoraSettings
from specsteer.engine import generate as engine_generate
from specsteer.engine.request import chat_ids
from specsteer.evaluation.grid import (
    EvalResult,
    EvalSpec,
    GridProgress,
    load_evaluation_records,
    run_grid,
    run_grid_events,
)
from specsteer.evaluation.record_lora import PER_RECORD_LABEL, adapter_path, record_training_items
from specsteer.models import loading
from specsteer.models.lora import ADAPTER_WEIGHTS, LORA_RUNTIME_MESSAGE, read_lora
from specsteer.models.tiny import tiny_pair
from specsteer.protocol.wire import Open, decode_stream

CANARY = "WOMBAT-canary-5521 teal accordion"
REFERENCE = "Dear guests, you are warmly invited to our spring gala."
FAST = LoraSettings(rank=4, alpha=8, dropout=0.0, learning_rate=5e-3, epochs=1, max_length=128)

pytestmark = [pytest.mark.usefixtures("fresh_engines"), pytest.mark.slow]  # a LoRA adapter trained per record


def cogenesis_record(number: int, texts: list[str] | None = None) -> dict:
    texts = texts or [f"Note {j} by user {number}: walks by the river, tea at five." for j in range(4)]
    return {
        "tid": f"{number}_1",
        "conversations": [
            {"from": "user", "value": f"Write an invitation to event {number}."},
            {"from": "assistant", "value": f"{REFERENCE} ({number})"},
        ],
        "profile": [{"title": f"Title {j}", "text": text, "id": j} for j, text in enumerate(texts)],
        "additional_profile": f"Name: User {number}\nOccupation: Baker\nPrivacy_info: Owns a red boat; Lives in Oslo",
        "additional_tasks": [],
    }


def write_records(tmp_path, records: list[dict]) -> str:
    path = tmp_path / "cogenesis_tiny.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, generalist_seed=1)


@pytest.fixture
def data(tmp_path):
    first = cogenesis_record(0)
    first["profile"][1]["text"] = f"Saturday market notes. {CANARY}. Bread sold out."
    return write_records(tmp_path, [first, cogenesis_record(1), cogenesis_record(2)])


def lora_spec(data: str, adapters, **changes) -> EvalSpec:
    spec = EvalSpec(
        data=data,
        task="cogenesis",
        methods=("slm+", "llm", "specsteer"),
        alphas=(0.1,),
        max_new_tokens=4,
        retrieval_k=2,
        prompt_style="clean",
        specialist_lora=f"per-record:{adapters}",
        lora_settings=FAST,
        run_name="per-record",
    )
    return replace(spec, **changes)


def training_lines(events) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for event in events:
        if isinstance(event, GridProgress) and event.stage == "training":
            lines.setdefault(event.record_id, []).append(event.detail)
    return lines


# --------------------------------------------------------------------------- what an adapter learns


def test_cogenesis_items_are_the_records_own_texts_never_its_task_or_reference(tmp_path):
    raw = cogenesis_record(7)
    raw["profile"].append({"title": "Copied", "text": f"{REFERENCE} (7)", "id": 4})  # the reference, verbatim
    raw["profile"].append({"title": "Write an invitation to event 7.", "text": "The task as a title.", "id": 5})
    (record,) = load_cogenesis(write_records(tmp_path, [raw]))
    taught = record_training_items(record)
    assert [target for _, target in taught] == [item["text"] for item in raw["profile"][:4]]
    for prompt, target in taught:
        assert REFERENCE not in prompt and REFERENCE not in target and record.input not in prompt
        assert sum(item["text"] in prompt for item in raw["profile"]) == 0  # no other text retrieved into it
        assert "Privacy_info" not in prompt  # nor the user profile: the texts alone are taught


def test_shared_cogenesis_test_records_teach_four_texts_and_never_the_reference():
    path = shared_cogenesis_path("test")
    if path is None:
        pytest.skip("no shared CoGenesis records here")
    for record in load_cogenesis(path, limit=20):
        taught = record_training_items(record)
        assert len(taught) == len(record.profile) == 4
        assert all(record.output not in prompt + target for prompt, target in taught)


# --------------------------------------------------------------------------- the grid


def test_each_record_runs_with_its_own_adapter_and_its_cells_carry_the_training(pair, data, tmp_path, url):
    adapters = tmp_path / "adapters"
    events, merged = [], []
    for event in run_grid_events(lora_spec(data, adapters), storage.SqlRunStore(url), pair=pair):
        events.append(event)
        if isinstance(event, GridProgress) and event.stage == "running" and event.record_id == "0_1" and not merged:
            merged += [weakref.ref(kept.specialist.model) for base, kept in loading._adapted.values() if base is pair]
        if isinstance(event, GridProgress) and event.stage == "training" and event.record_id == "1_1":
            gc.collect()  # record 0's merged Specialist is gone before record 1's training takes memory
            assert len(merged) == 1 and merged[0]() is None
    result = events[-1]
    assert isinstance(result, EvalResult) and result.status == "finished" and len(result.cells) == 9
    lines = training_lines(events)
    assert list(lines) == ["0_1", "1_1", "2_1"]  # one training per record, before its cells
    for details in lines.values():
        assert [d.split(" (")[0] for d in details if d.startswith("step")] == [f"step {n}/4" for n in range(1, 5)]
        assert details[-1].startswith("trained: record-")
    stored = storage.run_cells(storage.get_run_by_name("per-record", url=url).id, url=url)
    labels = {}
    for cell in stored:
        lora = read_lora(adapter_path(adapters, cell.record_id))
        details = lora.details()
        assert details["record_id"] == cell.record_id and details["items_used"] == 4 and details["steps"] == 4
        assert cell.stats.specialist_lora == lora.label
        assert cell.stats.lora_training_seconds == details["training_seconds"] > 0
        assert cell.stats.lora_training_steps == 4
        labels[cell.record_id] = lora.label
    assert len(set(labels.values())) == 3  # an adapter per record
    # Each record's merged copy is let go before the next record's: only the last one is still kept.
    assert [kept.lora.label for base, kept in loading._adapted.values() if base is pair] == [labels["2_1"]]
    config = storage.get_run_by_name("per-record", url=url).config
    assert config["specialist_lora"] == PER_RECORD_LABEL and config["runtime"] == "transformers"
    assert config["lora_settings"]["epochs"] == 1 and config["lora_settings"]["max_length"] == 128
    assert str(adapters) not in json.dumps(config)  # the directory is where they live, not what they are
    with pytest.raises(ValueError, match="different config"):  # other training settings: another run
        run_grid(lora_spec(data, adapters, lora_settings=replace(FAST, epochs=2)), storage.SqlRunStore(url), pair=pair)


def test_adapters_are_trained_once_and_read_back_on_resume(pair, data, tmp_path, url):
    adapters = tmp_path / "adapters"
    spec = lora_spec(data, adapters)
    cancel = threading.Event()
    first = []
    for event in run_grid_events(spec, storage.SqlRunStore(url), pair=pair, cancel=cancel):
        first.append(event)
        if isinstance(event, GridProgress) and event.stage == "running" and event.record_id == "1_1":
            cancel.set()  # record 1's adapter is written; its first cell is cut short
    assert first[-1].status == "cancelled" and list(training_lines(first)) == ["0_1", "1_1"]
    written = {rid: os.stat(adapter_path(adapters, rid) / ADAPTER_WEIGHTS).st_mtime_ns for rid in ("0_1", "1_1")}
    resumed = list(run_grid_events(spec, storage.SqlRunStore(url), pair=pair))
    assert resumed[-1].status == "finished" and len(resumed[-1].cells) == 9
    lines = training_lines(resumed)
    assert "0_1" not in lines  # its cells were done: no adapter needed
    assert not any(d.startswith("step") for d in lines["1_1"]) and lines["1_1"][-1].startswith("read back: ")
    assert any(d.startswith("step") for d in lines["2_1"])
    assert written == {rid: os.stat(adapter_path(adapters, rid) / ADAPTER_WEIGHTS).st_mtime_ns for rid in written}
    by_record = {cell.record_id: cell.stats for cell in resumed[-1].cells}
    assert (
        by_record["1_1"].lora_training_seconds == read_lora(adapter_path(adapters, "1_1")).details()["training_seconds"]
    )
    # Another run over the same directory and settings reads every adapter back...
    again = list(
        run_grid_events(replace(spec, run_name="again", methods=("slm+",)), storage.SqlRunStore(url), pair=pair)
    )
    assert all(details[-1].startswith("read back") for details in training_lines(again).values())
    # ...except one whose weights were changed or never finished (a leftover staging directory is ignored):
    weights = adapter_path(adapters, "2_1") / ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])
    (adapters / ".record-x.tmp").mkdir()
    third = training_lines(
        run_grid_events(replace(spec, run_name="third", methods=("slm+",)), storage.SqlRunStore(url), pair=pair)
    )
    assert [rid for rid, details in third.items() if details[-1].startswith("trained")] == ["2_1"]
    read_lora(adapter_path(adapters, "2_1"))  # whole again
    # Other training settings train again (and the manifests say so).
    fourth = run_grid(
        replace(spec, run_name="fourth", methods=("slm+",), lora_settings=replace(FAST, max_steps=2)),
        storage.SqlRunStore(url),
        pair=pair,
    )
    assert {cell.stats.lora_training_steps for cell in fourth.cells} == {2}
    assert read_lora(adapter_path(adapters, "0_1")).details()["settings"]["max_steps"] == 2


def test_the_cloud_gets_the_base_model_and_nothing_of_the_adapter_or_the_texts(pair, data, tmp_path, monkeypatch):
    from protocol.test_protocol import CapturingCloud

    clouds = []

    def capturing(edge_pair, read_ahead=False):
        clouds.append((edge_pair, CapturingCloud(edge_pair)))
        return clouds[-1][1]

    monkeypatch.setattr(engine_generate, "InProcessCloud", capturing)
    adapters = tmp_path / "adapters"
    store = storage.SqlRunStore(f"sqlite:///{tmp_path / 'cloud.db'}")
    spec = lora_spec(data, adapters, methods=("specsteer", "llm"), max_new_tokens=8)
    result = run_grid(spec, store, pair=pair)
    plain = {
        rid: chat_ids(pair.tokenizer, item.prompts.plain, pair.chat)
        for rid, item in load_evaluation_records(spec)[1].items()
    }
    assert result.status == "finished"
    adapted = [(edge, capture) for edge, capture in clouds if edge.lora is not None]
    assert len(adapted) == 6  # every cell ran with its record's adapter (the warm-up with the base pair)
    adapter_bytes = {}
    for record_id in ("0_1", "1_1", "2_1"):
        raw = (adapter_path(adapters, record_id) / ADAPTER_WEIGHTS).read_bytes()
        adapter_bytes[record_id] = raw[8 + int.from_bytes(raw[:8], "little") :]
    for edge, capture in adapted:
        service = capture.transport().service
        assert service.pair.specialist is pair.specialist and service.pair.lora is None  # the generic copy
        assert edge.specialist is not pair.specialist
        sent = b"".join(capture.uplink)
        assert CANARY.encode() not in sent and b"walks by the river" not in sent
        record_id = edge.lora.details()["record_id"]
        opens = [m for frame in capture.uplink for m in decode_stream(frame, "uplink") if isinstance(m, Open)]
        assert opens and all(list(m.prompt) == plain[record_id] for m in opens)  # the plain prompt, never more
        tensors = adapter_bytes[record_id]
        windows = {tensors[i : i + 16] for i in range(0, len(tensors) - 16, 4)}
        assert not any(sent[i : i + 16] in windows for i in range(len(sent) - 15))


def test_shards_train_only_their_records(pair, data, tmp_path, url):
    adapters = tmp_path / "adapters"
    spec = lora_spec(data, adapters, methods=("slm+",))
    first = run_grid(spec, storage.SqlRunStore(url), pair=pair, shard=(0, 2))
    assert first.status == "running"
    assert sorted(p.name for p in adapters.iterdir()) == sorted(adapter_path(adapters, r).name for r in ("0_1", "2_1"))
    second = run_grid(spec, storage.SqlRunStore(url), pair=pair, shard=(1, 2))
    assert second.status == "finished" and len(second.cells) == 3
    assert len(list(adapters.iterdir())) == 3


def test_a_record_without_texts_to_learn_fails_its_cells_and_the_run_goes_on(pair, tmp_path, url):
    bare = cogenesis_record(5, texts=[f"{REFERENCE} (5)"])  # its only text is its reference: nothing to learn
    data = write_records(tmp_path, [bare, cogenesis_record(6)])
    result = run_grid(lora_spec(data, tmp_path / "adapters", methods=("slm+",)), storage.SqlRunStore(url), pair=pair)
    assert result.status == "failed" and [cell.record_id for cell in result.cells] == ["6_1"]
    assert [failure.record_id for failure in result.failures] == ["5_1"]
    assert "LoRA adapter" in result.failures[0].message and "no history item" in result.failures[0].message


def test_per_record_specs_are_checked(pair, data, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        run_grid(lora_spec(data, tmp_path / "file"), MemoryStore(), pair=pair)
    with pytest.raises(ValueError, match="needs the directory"):
        lora_spec(data, "").validate()
    with pytest.raises(ValueError, match="go with per-record"):
        replace(lora_spec(data, "x"), specialist_lora="").validate()
    with pytest.raises(ValueError, match="epochs"):
        lora_spec(data, "x", lora_settings=replace(FAST, epochs=0)).validate()


def test_cli_runs_per_record_adapters_and_refuses_what_cannot_work(data, tmp_path, url, capsys):
    from specsteer.cli import main

    adapters = tmp_path / "cli-adapters"
    grid = ["evaluate", "--data", data, "--task", "cogenesis", "--limit", "2", "--methods", "slm+",
            "--pairing", "tiny-test", "--max-new-tokens", "2", "--prompt-style", "clean", "--json",
            "--database", url]  # fmt: skip
    code = main([*grid, "--specialist-lora", f"per-record:{adapters}", "--lora-max-steps", "2",
                 "--lora-max-length", "96"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "LoRA rec=0_1: step 2/2" in captured.err and "LoRA rec=1_1: trained: record-1_1-" in captured.err
    (run,) = storage.SqlRunStore(url).runs()
    assert run.config["specialist_lora"] == PER_RECORD_LABEL and run.config["lora_settings"]["max_steps"] == 2
    assert main([*grid, "--lora-epochs", "2", "--run-name", "plain"]) == 2
    assert "go with --specialist-lora per-record:DIR" in capsys.readouterr().err
    runtime = ["--specialist-lora", f"per-record:{adapters}", "--runtime", "llama.cpp", "--run-name", "cpp"]
    assert main([*grid, *runtime]) == 2
    assert LORA_RUNTIME_MESSAGE in capsys.readouterr().err
