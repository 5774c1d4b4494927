"""The LoRA Specialist (paper A.2): trained on the history on the device, served by the Edge only, refused
where it cannot run; tiny fp32 models."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from specsteer.cloud.service import CloudService
from specsteer.data.history import HistoryItem
from specsteer.data.privacy import audit_wire
from specsteer.edge.lora import (
    LoraSettings,
    LoraTrainingError,
    TrainingStopped,
    encode_examples,
    example_loss,
    train_lora,
    training_items,
)
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, chat_ids, prepare
from specsteer.models.loading import load_pair, with_specialist_lora
from specsteer.models.lora import ADAPTER_WEIGHTS, LORA_RUNTIME_MESSAGE, LoraError, read_lora
from specsteer.models.planning import lora_plan
from specsteer.models.tiny import tiny_pair
from specsteer.protocol.wire import Open, decode_stream

CANARY = "QUOKKA-canary-4417 purple kazoo"
HISTORY = (
    HistoryItem({"description": "Earbuds", "summary": "Loud", "reviewText": "Bass is great, battery ok. Would buy."}),
    HistoryItem({"description": "Kettle", "summary": "Fast", "reviewText": f"Boils fast. {CANARY}. Would buy."}),
    HistoryItem({"description": "Lamp", "summary": "Dim", "reviewText": "Too dim for reading. Would not buy."}),
)
FAST = LoraSettings(rank=4, alpha=8, dropout=0.0, learning_rate=5e-3, epochs=3, max_length=128)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(seed=0, generalist_seed=1)


@pytest.fixture(scope="module")
def probe(pair):
    """Logits of the base Specialist on one prompt, taken before any training."""
    ids = torch.tensor([chat_ids(pair.tokenizer, "Write a review of this product: Earbuds", pair.chat)])
    with torch.no_grad():
        return ids, pair.specialist.model(ids).logits.clone()


@pytest.fixture(scope="module")
def trained(pair, probe, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora") / "adapter"
    steps = []
    result = train_lora(pair, "review", HISTORY, out, FAST, progress=steps.append)
    return result, steps


def _history_loss(model, pair) -> float:
    examples = encode_examples(pair, training_items("review", HISTORY), FAST.max_length)
    losses = []
    with torch.no_grad():
        for example in examples:
            ids = torch.tensor([list(example.prompt) + list(example.target)])
            labels = ids.clone()
            labels[0, : len(example.prompt)] = -100  # transformers' own loss: the training's must equal it
            loss = float(model(input_ids=ids, labels=labels).loss)
            assert loss == pytest.approx(float(example_loss(model, example)), rel=1e-5)
            losses.append(loss)
    return sum(losses) / len(losses)


def test_training_lowers_the_loss_on_the_history(pair, trained):
    result, steps = trained
    assert len(steps) == len(result.losses) == 3 * len(HISTORY)
    assert [step.step for step in steps] == list(range(1, len(steps) + 1))
    adapted = with_specialist_lora(pair, result.lora)
    assert _history_loss(adapted.specialist.model, pair) < _history_loss(pair.specialist.model, pair) - 0.5


def test_the_adapter_changes_the_specialist_and_not_the_generic_copy(pair, probe, trained):
    ids, before = probe
    adapted = with_specialist_lora(pair, trained[0].lora)
    with torch.no_grad():
        assert not torch.allclose(adapted.specialist.model(ids).logits, before, atol=1e-3)
        assert torch.equal(pair.specialist.model(ids).logits, before)  # the base is untouched by training
    assert adapted.specialist.model is not pair.specialist.model
    assert adapted.cloud_side().specialist is pair.specialist
    assert CloudService(adapted).pair.specialist is pair.specialist  # the Cloud's generic copy stays the base
    assert with_specialist_lora(pair, trained[0].lora) is adapted  # merged once, kept


def test_the_manifest_names_base_task_settings_and_curve(pair, trained):
    result, _ = trained
    details = result.lora.details()
    assert result.lora.task == details["task"] == "review"
    assert details["items_used"] == 3 and details["steps"] == 9 and len(details["losses"]) == 9
    assert details["settings"]["target_modules"] == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    assert details["pairing"] == pair.pairing_id and details["dtype"] == "float32"
    assert details["training_seconds"] > 0
    assert result.lora.label.startswith("adapter@") and len(result.lora.label) == len("adapter@") + 12


def test_another_base_is_refused(trained):
    with pytest.raises(LoraError, match="trained on the Specialist"):
        with_specialist_lora(tiny_pair(seed=7, generalist_seed=1), trained[0].lora)


def test_llama_cpp_is_refused_and_auto_picks_transformers(trained):
    with pytest.raises(LoraError) as refused:
        load_pair("offline-qwen2.5-coder", runtime="llama.cpp", specialist_lora=trained[0].lora)
    assert str(refused.value) == LORA_RUNTIME_MESSAGE
    plan = lora_plan("auto")
    assert plan.runtime == "transformers" and "LoRA" in plan.reason and plan.lora


def test_a_changed_or_partial_adapter_is_refused(tmp_path, trained):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in trained[0].lora.path.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    weights = bytearray((copy / ADAPTER_WEIGHTS).read_bytes())
    weights[-1] ^= 1
    (copy / ADAPTER_WEIGHTS).write_bytes(bytes(weights))
    with pytest.raises(LoraError, match="sha256"):
        read_lora(copy)
    (copy / ADAPTER_WEIGHTS).unlink()
    with pytest.raises(LoraError, match="missing"):
        read_lora(copy)
    with pytest.raises(LoraError, match="no LoRA adapter"):
        read_lora(tmp_path / "absent")


def test_items_the_evaluation_asks_about_are_left_out():
    taught = training_items("review", HISTORY, exclude=["lamp", "  Bass is great, battery ok.   Would buy."])
    assert [target for _, target in taught] == [HISTORY[1].fields["reviewText"]]
    assert all("Here are past reviews" not in prompt for prompt, _ in taught)  # no other item in the prompt
    with pytest.raises(LoraTrainingError, match="tasks"):
        training_items("lamp4", HISTORY)


def test_a_stop_writes_nothing(pair, tmp_path):
    cancel = threading.Event()
    out = tmp_path / "stopped"
    with pytest.raises(TrainingStopped):
        train_lora(pair, "review", HISTORY, out, FAST, progress=lambda _: cancel.set(), cancel=cancel)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_no_uplink_frame_carries_history_text_or_adapter_bytes(pair, trained):
    from protocol.test_protocol import CapturingCloud

    adapted = with_specialist_lora(pair, trained[0].lora)
    prepared = prepare(Request(task="review", input_text="Write a review of a kettle.", history=HISTORY, retrieval_k=3))
    assert CANARY in prepared.prompts.private and CANARY not in prepared.prompts.plain
    plain_ids = chat_ids(pair.tokenizer, prepared.prompts.plain, pair.chat)
    adapter = (trained[0].lora.path / ADAPTER_WEIGHTS).read_bytes()
    header = int.from_bytes(adapter[:8], "little")
    tensors = adapter[8 + header :]
    for method in ("specsteer", "lightcosteer", "llm"):
        cloud = CapturingCloud(adapted)
        tokens, finished = collect(
            generate(adapted, prepared, DecodeConfig(method=method, max_new_tokens=16), cloud=cloud)
        )
        assert finished.stats.specialist_lora == trained[0].lora.label
        wire = audit_wire(cloud.uplink, cloud.downlink, plain_ids, tokens)
        assert wire.ok, wire.problems
        sent = b"".join(cloud.uplink)
        assert CANARY.encode() not in sent
        for item in HISTORY:
            assert item.fields["reviewText"].encode() not in sent
        # No 16-byte run of the adapter's tensors crosses (16 bytes: four of its float32 values).
        windows = {tensors[i : i + 16] for i in range(0, len(tensors) - 16, 4)}
        assert not any(sent[i : i + 16] in windows for i in range(len(sent) - 15))
        model_tokens = {t.id for t in tokens}
        for frame in cloud.uplink:
            for message in decode_stream(frame, "uplink"):
                if isinstance(message, Open):
                    assert list(message.prompt) == plain_ids
                else:
                    assert set(message.draft) | set(message.append) <= model_tokens


def test_cli_trains_then_generates_with_the_adapter(tmp_path, capsys):
    from specsteer.cli import main

    history = tmp_path / "history.jsonl"
    history.write_text("\n".join(json.dumps(dict(item.fields)) for item in HISTORY) + "\n")
    out = tmp_path / "cli-adapter"
    code = main(["lora", "train", "--pairing", "tiny-test", "--history", str(history), "--task", "review",
                 "--out", str(out), "--max-steps", "2", "--max-length", "96"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "step 2/2" in captured.err and "cli-adapter@" in captured.out
    label = read_lora(out).label
    arguments = ["generate", "--pairing", "tiny-test", "--specialist-lora", str(out), "--history", str(history),
                 "--task", "review", "--input", "Write a review of the Aurora wireless earbuds.",
                 "--max-new-tokens", "6", "--json"]  # fmt: skip
    assert main(arguments) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["stats"]["specialist_lora"] == label
    assert "LoRA" in document["stats"]["runtime_choice"]
    assert main([*arguments, "--runtime", "llama.cpp"]) == 2
    assert LORA_RUNTIME_MESSAGE in capsys.readouterr().err
    assert main(["generate", *arguments[1:4], str(tmp_path / "none"), *arguments[5:]]) == 2
    assert "no LoRA adapter" in capsys.readouterr().err


def test_evaluate_and_bench_take_the_adapter(pair, trained, url, capsys):
    import storage
    from specsteer.cli import main

    adapter = str(trained[0].lora.path)
    grid = ["evaluate", "--data", "sample", "--task", "review", "--limit", "1", "--methods", "slm+",
            "--pairing", "tiny-test", "--max-new-tokens", "2", "--json", "--database", url]  # fmt: skip
    assert main([*grid, "--specialist-lora", adapter]) == 0
    (run,) = storage.SqlRunStore(url).runs()
    assert run.config["specialist_lora"] == trained[0].lora.label
    assert main([*grid, "--specialist-lora", adapter, "--runtime", "llama.cpp", "--run-name", "other"]) == 2
    assert LORA_RUNTIME_MESSAGE in capsys.readouterr().err
    bench = ["bench", "speed", "--pairing", "tiny-test", "--specialist-lora", adapter, "--prompts", "1",
             "--max-new-tokens", "2", "--methods", "slm+", "--draft-len", "4", "--no-reference",
             "--no-prefix-reuse", "--json"]  # fmt: skip
    assert main(bench) == 0
    assert json.loads(capsys.readouterr().out)["specialist_lora"] == trained[0].lora.label
    assert main([*bench, "--runtime", "llama.cpp"]) == 2
    assert LORA_RUNTIME_MESSAGE in capsys.readouterr().err


def test_the_fingerprint_reads_across_each_tensor_and_ignores_the_dtype():
    from specsteer.models.lora import base_fingerprint
    from specsteer.models.tiny import tiny_model

    model = tiny_model(0)
    before = base_fingerprint(model)
    assert base_fingerprint(tiny_model(0).to(torch.bfloat16)) == before  # a bf16 load of the same weights
    with torch.no_grad():
        model.lm_head.weight[-1, -1] += 1.0  # the last value of a tensor
    assert base_fingerprint(model) != before
