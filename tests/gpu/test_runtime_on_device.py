"""The runtime contract on the tier's device (tests/gpu/conftest.py), in fp32, and what a pass costs the host.

Tolerance (fp32, stated): a row within 1e-4 of a fresh evaluation of the same tokens on the same device (cached
against uncached passes, crops, prefix reuse), and within 1e-3 of the CPU's row for the same weights (another
device's kernels). The tiny models' logits spread over a few units.

One device-to-host transfer per pass: every pass copies its logits rows to the host once, and nothing else in it
reads the device. Counted by wrapping torch.Tensor's host reads during each ``Sequence.extend`` (on the CPU too,
where the same reads would be a GPU's synchronisations), and on CUDA also by torch's own synchronisation report.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate_ids
from specsteer.method.decoding import ForwardLog, Stream
from specsteer.models.tiny import tiny_model, tiny_pair, tiny_tokenizer
from specsteer.runtimes.base import TransformersModel, TransformersSequence

SAME_DEVICE = 1e-4
ACROSS_DEVICES = 1e-3
TEXT = "Rivers carry water to the sea; naïve 東京 🚀 ends here."


@pytest.fixture(autouse=True)
def exact_fp32_matmuls():
    """fp32 means fp32 on CUDA too: no TF32 in the matmuls while the tier compares rows."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = previous


def _ids() -> list[int]:
    return tiny_tokenizer().encode(TEXT)


def _on(device: str, seed: int) -> TransformersModel:
    return TransformersModel(tiny_model(seed).to(device), f"tiny-{seed}")


def _fresh_rows(model: TransformersModel, ids: list[int], rows: int) -> torch.Tensor:
    sequence = model.new_sequence(len(ids) + 8)
    try:
        return sequence.extend(ids, rows)
    finally:
        sequence.close()


def _close(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> None:
    difference = float((actual - expected).abs().max())
    assert difference <= tolerance, f"rows differ by {difference} (tolerance {tolerance})"


def test_rows_come_back_fp32_on_the_host_and_the_cache_stays_on_the_device(device):
    model = _on(device, 0)
    ids = _ids()
    sequence = model.new_sequence(len(ids))
    rows = sequence.extend(ids, 3)
    assert rows.dtype == torch.float32 and rows.device.type == "cpu" and rows.shape == (3, model.output_rows)
    assert model.device.startswith(torch.device(device).type)
    layer = sequence._cache.layers[0]  # the keys of the first layer: where the KV cache lives
    assert layer.keys.device.type == torch.device(device).type
    assert sequence.nbytes == model.sequence_bytes(len(ids))  # the admission's estimate is what it holds


def test_extend_in_pieces_equals_one_pass_and_the_cpu(device):
    model = _on(device, 0)
    ids = _ids()
    every = _fresh_rows(model, ids, len(ids))
    sequence = model.new_sequence(len(ids))
    first = sequence.extend(ids[:10], 1)
    rest = sequence.extend(ids[10:], len(ids) - 10)
    _close(first[0], every[9], SAME_DEVICE)
    _close(rest, every[10:], SAME_DEVICE)
    on_cpu = TransformersModel(copy.deepcopy(model.model).to("cpu"), "cpu copy")
    _close(every, _fresh_rows(on_cpu, ids, len(ids)), ACROSS_DEVICES)


def test_crop_at_every_position_continues_like_a_fresh_evaluation(device):
    model = _on(device, 1)
    ids = _ids()
    expected = _fresh_rows(model, ids, len(ids))
    sequence = model.new_sequence(len(ids))
    sequence.extend(ids, 1)
    for position in range(len(ids) - 1, 0, -1):
        sequence.crop(position)
        assert sequence.tokens == ids[:position]
        _close(sequence.extend(ids[position : position + 1], 1)[0], expected[position], SAME_DEVICE)
        sequence.crop(position)


def test_rollback_then_another_continuation(device):
    """A rejected draft on the device: the cache is cut back and other tokens follow as if it never was."""
    model = _on(device, 2)
    ids = _ids()
    other = tiny_tokenizer().encode(" and the ocean")
    sequence = model.new_sequence(64)
    sequence.extend(ids, 1)
    sequence.crop(12)
    _close(sequence.extend(other, len(other)), _fresh_rows(model, ids[:12] + other, len(other)), SAME_DEVICE)


def test_a_prefix_cache_hit_gives_the_rows_of_a_fresh_read(device):
    model = _on(device, 3)
    ids = _ids()
    log = ForwardLog()
    first = Stream(model, ids, model.output_rows, log, "generalist", capacity=64)
    first.predict(1)
    first.close()  # its sequence goes back to the model's prefix cache
    again = Stream(model, ids[:-3] + [7, 8, 9], model.output_rows, log, "generalist", capacity=64)
    assert again.reused == len(ids) - 3
    _close(again.predict(3), _fresh_rows(model, ids[:-3] + [7, 8, 9], 3), SAME_DEVICE)
    again.close()


HOST_READS = ("cpu", "item", "tolist", "numpy", "__int__", "__float__", "__bool__", "__index__")


class _TransferCount:
    """Host reads of tensors during each pass (``TransformersSequence.extend``): ``.cpu()``, ``.item()``,
    ``.tolist()``, ``.numpy()``, ``int()``/``float()``/``bool()``/an index, and ``.to()`` a CPU device from another
    one. Each would make the host wait for a GPU. An upload of the pass's ids (``.to`` the model's device) is
    not a read."""

    def __init__(self) -> None:
        self.in_pass = False
        self.current = 0
        self.per_pass: list[int] = []

    def install(self, monkeypatch) -> None:
        for name in HOST_READS:
            monkeypatch.setattr(torch.Tensor, name, self._counted(getattr(torch.Tensor, name)))
        original_to = torch.Tensor.to

        def to(tensor, *args, **kwargs):
            result = original_to(tensor, *args, **kwargs)
            if self.in_pass and tensor.device.type != "cpu" and result.device.type == "cpu":
                self.current += 1
            return result

        monkeypatch.setattr(torch.Tensor, "to", to)
        extend = TransformersSequence.extend

        def counted_extend(sequence, ids, rows):
            self.in_pass, self.current = True, 0
            try:
                return extend(sequence, ids, rows)
            finally:
                self.in_pass = False
                self.per_pass.append(self.current)

        monkeypatch.setattr(TransformersSequence, "extend", counted_extend)

    def _counted(self, method):
        def read(tensor, *args, **kwargs):
            if self.in_pass:
                self.current += 1
            return method(tensor, *args, **kwargs)

        return read


@pytest.mark.parametrize("method", ["specsteer", "llm", "slm+"])
def test_each_pass_reads_the_device_once(device, monkeypatch, method):
    pair = tiny_pair(device=device)
    plain = tiny_tokenizer().encode("Write about the sea.")
    private = tiny_tokenizer().encode("History: I love long walks. Write about the sea.")
    count = _TransferCount()
    count.install(monkeypatch)
    _, finished = collect(generate_ids(pair, plain, private, DecodeConfig(method=method, max_new_tokens=12)))
    passes = sum(finished.stats.forward_calls.values())
    assert len(count.per_pass) == passes > 0
    assert count.per_pass == [1] * passes, f"host reads per pass: {count.per_pass}"


def test_a_cuda_pass_synchronises_once(device, on_cuda):
    """torch's own report of synchronising CUDA calls (``set_sync_debug_mode``): one per pass, its logits' copy."""
    if not on_cuda:
        pytest.skip("torch reports CUDA synchronisations on a CUDA device only")
    model = _on(device, 4)
    ids = _ids()
    sequence = model.new_sequence(len(ids) + 4)
    sequence.extend(ids, 1)  # the first pass builds the kernels' state; the steady passes are what count
    torch.cuda.synchronize()
    counts = []
    previous = torch.cuda.get_sync_debug_mode()
    try:
        for token in (5, 6, 7):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                sequence.extend([token], 1)
                torch.cuda.set_sync_debug_mode(previous)
            counts.append(sum("synchroniz" in str(w.message) for w in caught))
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert all(count <= 1 for count in counts), f"synchronising calls per pass: {counts}"
