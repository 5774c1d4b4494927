"""A listed pairing's id drives ``specsteer cloud --engine vllm`` by itself: its engines serve the offline
models' converted caches. No vLLM and no model files: a temporary cache with the markers the loader writes."""

from __future__ import annotations

import json
import tempfile

import pytest

import specsteer.cli.vllm_cloud as vllm_command
from specsteer.cli.cloud import main
from specsteer.cloud.vllm import pairing_model_dirs
from specsteer.models.registry import CACHE_MARKER, DEFAULT_PAIRING, PAIRINGS, converted_model_dir, get_pairing


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def convert(spec, sha256: str | None = None) -> None:
    """What a finished conversion leaves: the directory, its config, and the marker naming the GGUF's hash."""
    directory = converted_model_dir(spec)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({"vocab_size": 151936}))
    (directory / CACHE_MARKER).write_text(json.dumps({"sha256": sha256 or spec.sha256}))


def test_an_offline_pairing_serves_its_converted_caches_generalist_first(empty_cache):
    pairing = get_pairing(DEFAULT_PAIRING)
    convert(pairing.specialist)
    convert(pairing.generalist)
    assert pairing_model_dirs(DEFAULT_PAIRING) == (
        converted_model_dir(pairing.generalist),
        converted_model_dir(pairing.specialist),
    )
    assert converted_model_dir(pairing.generalist).is_relative_to(empty_cache)


def test_a_missing_or_stale_conversion_says_how_to_make_it(empty_cache):
    pairing = get_pairing(DEFAULT_PAIRING)
    convert(pairing.specialist)
    convert(pairing.generalist, sha256="0" * 64)  # made from another GGUF: not this model's weights
    message = pairing_model_dirs(DEFAULT_PAIRING)
    assert isinstance(message, str)
    assert pairing.generalist.name in message
    assert f"specsteer models prepare --pairing {DEFAULT_PAIRING} --runtime transformers" in message


def test_hub_and_unknown_pairings_ask_for_directories(empty_cache):
    hub = next(p.id for p in PAIRINGS.values() if p.generalist.kind == "hub")
    assert "--vllm-generalist-model" in pairing_model_dirs(hub)
    assert "unknown pairing 'no-such-pairing'" in pairing_model_dirs("no-such-pairing")


def test_the_cloud_command_refuses_an_unconverted_pairing_with_that_message(empty_cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(vllm_command, "vllm_available", lambda: None)  # as if .venv-vllm were there
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = main(["cloud", "--engine", "vllm", "--pairing", DEFAULT_PAIRING, "--port", "0"])
    assert code == 2
    error = capsys.readouterr().err
    assert "has no converted weights yet" in error
    assert "models prepare" in error
