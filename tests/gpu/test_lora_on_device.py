"""The LoRA Specialist on the tier's device: one training step of an adapter on a history, written and read back,
merged into a copy of the Specialist that stays on the device, and generating there (tiny fp32 models)."""

from __future__ import annotations

import torch

from specsteer.data.history import HistoryItem
from specsteer.edge.lora import LoraSettings, encode_examples, example_loss, train_lora, training_items
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.engine.request import chat_ids
from specsteer.models.loading import with_specialist_lora
from specsteer.models.tiny import tiny_pair

HISTORY = (
    HistoryItem({"description": "Kettle", "summary": "Fast", "reviewText": "Boils fast and pours well. Would buy."}),
    HistoryItem({"description": "Lamp", "summary": "Dim", "reviewText": "Too dim for reading. Would not buy."}),
)
ONE_STEP = LoraSettings(rank=4, alpha=8, dropout=0.0, learning_rate=5e-2, epochs=1, max_length=96, max_steps=1)


def test_one_training_step_and_a_merge_on_the_device(device, tmp_path):
    pair = tiny_pair(device=device)
    result = train_lora(pair, "review", HISTORY, tmp_path / "adapter", ONE_STEP)
    assert len(result.losses) == 1 and torch.isfinite(torch.tensor(result.losses)).all()
    adapted = with_specialist_lora(pair, result.lora)
    merged = adapted.specialist.model
    assert all(p.device.type == torch.device(device).type for p in merged.parameters())
    assert not any("lora_" in name for name, _ in merged.named_parameters())  # merged in, not wrapped
    # The step moved the weights: the merged copy's loss on the history differs from the base's.
    example = encode_examples(pair, training_items("review", HISTORY), ONE_STEP.max_length)[0]
    with torch.no_grad():
        base_loss = float(example_loss(pair.specialist.model, example))
        merged_loss = float(example_loss(merged, example))
    assert merged_loss != base_loss
    # The base stays the Cloud's generic copy, on the device; the adapted Edge generates there.
    assert adapted.cloud_side().specialist is pair.specialist
    plain = chat_ids(pair.tokenizer, "Write a review of this product: Kettle", pair.chat)
    _, finished = collect(generate_ids(adapted, plain, plain, DecodeConfig(method="specsteer", max_new_tokens=8)))
    assert 0 < finished.stats.new_tokens <= 8
    assert finished.stats.specialist_lora == result.lora.label
