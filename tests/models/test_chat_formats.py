"""Per-model chat formats (specsteer.models.chat): the registry's values, the defaults of user-given models, and
hub pairings loaded for real, offline, from hub-format model directories of tiny models whose
tokenizers' templates honour those formats (a Qwen3-style one that thinks unless told not to, a
Llama-3-style one whose turns end with <|eot_id|>)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import huggingface_hub.constants
import pytest

import storage
from specsteer.data.history_upload import parse_history
from specsteer.data.sources import sample_history_path
from specsteer.engine.decode_config import DecodeConfig
from specsteer.engine.generate import collect, generate
from specsteer.engine.request import Request, chat_ids, prepare
from specsteer.models import loading
from specsteer.models import weights as models
from specsteer.models.chat import CHATML_CHAT, LLAMA3_CHAT, PLAIN_CHAT, QWEN3_CHAT, ChatFormat, family_chat_format
from specsteer.models.loading import load_pair, pair_chat_format
from specsteer.models.registry import PAIRINGS, Pairing, pairing_status, resolve_pairing
from specsteer.models.tiny import (
    BEGIN_OF_TEXT_ID,
    END_OF_TEXT_ID,
    EOT_ID,
    tiny_llama3_tokenizer,
    tiny_model,
    tiny_qwen3_tokenizer,
)

QWEN3_PAIRING = "qwen3-0.6b__qwen3-1.7b"
LLAMA3_PAIRING = "llama3.2-1b__llama3.1-8b"
CLOSED_THINKING = "<|im_start|>assistant\n<think>\n\n</think>\n\n"  # how Qwen3 turns thinking off
OPEN_REPLY = "<|im_start|>assistant\n"
REQUEST = Request(
    task="review",
    input_text="Write a review of a power bank with great battery life",
    history=parse_history(sample_history_path("review").read_bytes(), filename="review.jsonl").items,
    retrieval_k=2,
)


# --------------------------------------------------------------------------- the format itself


def test_a_format_is_hashable_and_normalised():
    first = ChatFormat(template_options=(("b", 1), ("a", True)), end_tokens=("<x>", "<y>", "<x>"))
    second = ChatFormat(template_options=(("a", True), ("b", 1)), end_tokens=("<x>", "<y>"))
    assert first == second and hash(first) == hash(second)
    assert first.template_kwargs == {"a": True, "b": 1}


@pytest.mark.parametrize(
    "options, fragment",
    [
        ((("enable_thinking", False), ("enable_thinking", True)), "given twice"),
        ((("enable-thinking", False),), "not a valid keyword"),
        ((("tools", ["x"]),), "only bool"),
    ],
)
def test_bad_template_options_are_refused(options, fragment):
    with pytest.raises(ValueError, match=fragment):
        ChatFormat(template_options=options)


def test_a_pair_takes_the_specialists_options_completed_by_the_generalists_and_both_end_lists():
    thinking_on = ChatFormat(template_options=(("enable_thinking", True),), end_tokens=("<|im_end|>",))
    assert PLAIN_CHAT.joined(QWEN3_CHAT) == QWEN3_CHAT  # an unrecognised Specialist still gets thinking off
    assert thinking_on.joined(QWEN3_CHAT).template_kwargs == {"enable_thinking": True}
    assert thinking_on.disagreements(QWEN3_CHAT) == ("enable_thinking",)
    assert QWEN3_CHAT.disagreements(PLAIN_CHAT) == ()
    assert LLAMA3_CHAT.joined(CHATML_CHAT).end_tokens == LLAMA3_CHAT.end_tokens + CHATML_CHAT.end_tokens

    lines: list[str] = []
    pairing = Pairing(
        id="mixed",
        label="mixed",
        specialist=PAIRINGS[QWEN3_PAIRING].specialist,
        generalist=replace(PAIRINGS[QWEN3_PAIRING].generalist, chat=thinking_on),
    )
    assert pair_chat_format(pairing, lines.append) == QWEN3_CHAT
    assert len(lines) == 1 and "'enable_thinking'" in lines[0] and "Specialist's False" in lines[0]


def test_a_tokenizer_without_a_template_gets_its_familys_turns_and_its_own_template_wins():
    from specsteer.models.chat import GEMMA3_CHAT
    from specsteer.models.tiny import tiny_tokenizer

    bare = tiny_tokenizer()
    bare.chat_template = None  # as the Gemma-3-270M base GGUF reads: no template
    bare.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    rendered = bare.decode(chat_ids(bare, "Write a poem.", GEMMA3_CHAT))
    assert rendered.endswith("<start_of_turn>user\nWrite a poem.<end_of_turn>\n<start_of_turn>model\n")
    with pytest.raises(ValueError, match="chat_template"):
        chat_ids(bare, "Write a poem.", CHATML_CHAT)  # no template anywhere: the tokenizer's own error
    own = tiny_tokenizer()
    assert chat_ids(own, "hi", GEMMA3_CHAT) == chat_ids(own, "hi", CHATML_CHAT)  # its template, not Gemma's
    assert CHATML_CHAT.joined(GEMMA3_CHAT).fallback_template == GEMMA3_CHAT.fallback_template


# --------------------------------------------------------------------------- registry values and defaults


def test_every_registry_model_has_its_familys_format():
    specs = [spec for pairing in PAIRINGS.values() for spec in (pairing.specialist, pairing.generalist)]
    for spec in specs:
        assert spec.chat.end_tokens, spec.name
        # Set by hand in the registry; the family rule that custom models get must agree with it.
        assert family_chat_format(spec.ref) == spec.chat, spec.name
    for role in ("specialist", "generalist"):
        assert getattr(PAIRINGS["qwen3-0.6b__qwen3-32b"], role).chat.template_kwargs == {"enable_thinking": False}
        assert getattr(PAIRINGS[QWEN3_PAIRING], role).chat.template_kwargs == {"enable_thinking": False}
        assert "<|eot_id|>" in getattr(PAIRINGS[LLAMA3_PAIRING], role).chat.end_tokens
        assert getattr(PAIRINGS["qwen2.5-1.5b__qwen2.5-32b"], role).chat == CHATML_CHAT


@pytest.mark.parametrize(
    "clue, expected",
    [
        ("Qwen/Qwen3-8B", QWEN3_CHAT),
        ("Qwen/Qwen3-30B-A3B-Instruct-2507", QWEN3_CHAT),
        ("Qwen/Qwen2.5-7B-Instruct", CHATML_CHAT),
        ("meta-llama/Meta-Llama-3-8B-Instruct", LLAMA3_CHAT),
        ("Llama-3.2-3B-Instruct-Q4_K_M", LLAMA3_CHAT),
        ("huggyllama/llama-30b", PLAIN_CHAT),  # Llama 1, not 3
        ("mistralai/Mistral-7B-Instruct-v0.3", PLAIN_CHAT),
        ("/models/qwen3-collection/my-model", PLAIN_CHAT),  # only the model's own name counts
    ],
)
def test_family_defaults(clue, expected):
    assert family_chat_format(clue) == expected


def test_user_given_models_get_their_familys_format(tmp_path):
    hub = resolve_pairing(specialist="Qwen/Qwen3-4B", generalist="Qwen/Qwen3-14B")
    assert hub.specialist.chat == hub.generalist.chat == QWEN3_CHAT

    by_name = tmp_path / "Qwen3-0.6B-finetuned"
    by_config = tmp_path / "checkpoint-1200"
    unknown = tmp_path / "my-model"
    for directory, model_type in ((by_name, "qwen2"), (by_config, "qwen3"), (unknown, "mistral")):
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps({"model_type": model_type}))
    gguf = tmp_path / "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF")

    assert resolve_pairing(specialist=str(by_name)).specialist.chat == QWEN3_CHAT
    assert resolve_pairing(specialist=str(by_config)).specialist.chat == QWEN3_CHAT
    assert resolve_pairing(specialist=str(unknown)).specialist.chat == PLAIN_CHAT
    assert resolve_pairing(generalist=str(gguf)).generalist.chat == LLAMA3_CHAT
    # A model named as the registry names it keeps the registry's format.
    assert resolve_pairing(specialist="qwen2.5-coder-0.5b-instruct-q4_k_m").specialist.chat == CHATML_CHAT


# --------------------------------------------------------------------------- hub pairings, offline


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face cache that the hub client and transformers read, with the hub offline."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SPECSTEER_CACHE", str(tmp_path / "specsteer"))
    loading.clear_loaded_pairs()
    yield cache
    loading.clear_loaded_pairs()


def put_in_hub_cache(cache: Path, repo_id: str, model, tokenizer) -> None:
    """Save a model as the hub client leaves a downloaded repository: the files in
    ``models--owner--name/snapshots/<commit>/`` and ``refs/main`` naming that commit."""
    repository = cache / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repository / "snapshots" / commit
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(commit)


def cache_qwen3_pairing(cache: Path) -> None:
    pairing = PAIRINGS[QWEN3_PAIRING]
    for seed, spec in enumerate((pairing.specialist, pairing.generalist)):
        put_in_hub_cache(cache, spec.ref, tiny_model(seed), tiny_qwen3_tokenizer())


def cache_llama3_pairing(cache: Path, eos_bias: float) -> None:
    """Tiny models whose own configs end only at <|end_of_text|> (as Llama 3's first release did),
    biased towards ending their turns with <|eot_id|>."""
    pairing = PAIRINGS[LLAMA3_PAIRING]
    for seed, spec in enumerate((pairing.specialist, pairing.generalist)):
        model = tiny_model(seed, eos_bias=eos_bias)
        for config in (model.config, model.generation_config):
            config.bos_token_id, config.eos_token_id, config.pad_token_id = BEGIN_OF_TEXT_ID, END_OF_TEXT_ID, None
        put_in_hub_cache(cache, spec.ref, model, tiny_llama3_tokenizer())


def without_chat_format(pairing: Pairing) -> Pairing:
    """The same hub models with no chat format: what loading did before the registry had one."""
    return replace(
        pairing,
        id=f"{pairing.id}:plain",
        specialist=replace(pairing.specialist, chat=PLAIN_CHAT),
        generalist=replace(pairing.generalist, chat=PLAIN_CHAT),
    )


def record_prompts(pair, monkeypatch) -> dict[str, list[list[int]]]:
    """Every prompt each model's streams start from (ModelRuntime.acquire), by role."""
    seen: dict[str, list[list[int]]] = {"specialist": [], "generalist": []}
    for role, prompts in seen.items():
        runtime = getattr(pair, role)

        def acquire(prompt, capacity, original=runtime.acquire, prompts=prompts):
            prompts.append(list(prompt))
            return original(prompt, capacity)

        monkeypatch.setattr(runtime, "acquire", acquire)
    return seen


def test_qwen3_hub_pairing_renders_every_prompt_with_thinking_off(hub_cache, monkeypatch):
    cache_qwen3_pairing(hub_cache)
    assert pairing_status(PAIRINGS[QWEN3_PAIRING]) == (True, "in the local Hugging Face cache")
    pair = load_pair(QWEN3_PAIRING, dtype="fp32")
    assert pair.chat == QWEN3_CHAT and pair.runtime == "transformers"
    prompts = record_prompts(pair, monkeypatch)

    _, finished = collect(generate(pair, REQUEST, DecodeConfig(method="specsteer", max_new_tokens=8)))

    prepared = prepare(REQUEST)
    plain = chat_ids(pair.tokenizer, prepared.prompts.plain, pair.chat)
    private = chat_ids(pair.tokenizer, prepared.prompts.private, pair.chat)
    # The Generalist and the generic Specialist copy read the same ids; the Edge reads the private prompt.
    assert prompts["generalist"] == [plain] and sorted(prompts["specialist"]) == sorted([plain, private])
    assert finished.transcript[0].payload["prompt"] == plain
    for ids in (plain, private):
        assert pair.tokenizer.decode(ids).endswith(CLOSED_THINKING)


def test_without_the_registrys_format_qwen3_prompts_leave_the_reply_to_think(hub_cache, monkeypatch):
    """The control: the same models and tokenizer, loaded with no chat format."""
    cache_qwen3_pairing(hub_cache)
    pair = load_pair(without_chat_format(PAIRINGS[QWEN3_PAIRING]), dtype="fp32")
    prompts = record_prompts(pair, monkeypatch)
    collect(generate(pair, REQUEST, DecodeConfig(method="specsteer", max_new_tokens=4)))
    for ids in prompts["generalist"] + prompts["specialist"]:
        text = pair.tokenizer.decode(ids)
        assert text.endswith(OPEN_REPLY) and "</think>" not in text


def test_a_custom_pairing_of_qwen3_directories_gets_thinking_off(tmp_path, hub_cache):
    small, large = tmp_path / "Qwen3-0.6B-mine", tmp_path / "Qwen3-1.7B-mine"
    for seed, directory in enumerate((small, large)):
        tiny_model(seed).save_pretrained(directory)
        tiny_qwen3_tokenizer().save_pretrained(directory)
    pair = load_pair(resolve_pairing(specialist=str(small), generalist=str(large)), dtype="fp32")
    assert pair.chat == QWEN3_CHAT
    _, finished = collect(generate(pair, REQUEST, DecodeConfig(method="llm", max_new_tokens=4)))
    assert pair.tokenizer.decode(finished.transcript[0].payload["prompt"]).endswith(CLOSED_THINKING)


def test_llama3_hub_pairing_stops_at_eot(hub_cache):
    cache_llama3_pairing(hub_cache, eos_bias=5.0)
    pair = load_pair(LLAMA3_PAIRING, dtype="fp32")
    assert pair.chat == LLAMA3_CHAT and pair.tokenizer.eos_token_id == END_OF_TEXT_ID
    assert {EOT_ID, END_OF_TEXT_ID} <= pair.eos_token_ids
    prompt = pair.tokenizer.decode(chat_ids(pair.tokenizer, "Hi", pair.chat))
    assert prompt == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    for method in ("specsteer", "llm", "slm+"):
        _, finished = collect(generate(pair, REQUEST, DecodeConfig(method=method, max_new_tokens=64)))
        assert finished.stats.stop_reason == "eos", method
        assert finished.token_ids[-1] == EOT_ID and EOT_ID not in finished.token_ids[:-1], method


def test_without_the_registrys_end_tokens_llama3_runs_past_eot(hub_cache):
    """The control: the models' own configs end only at <|end_of_text|>, so <|eot_id|> does not stop them."""
    cache_llama3_pairing(hub_cache, eos_bias=5.0)
    pair = load_pair(without_chat_format(PAIRINGS[LLAMA3_PAIRING]), dtype="fp32")
    assert EOT_ID not in pair.eos_token_ids
    _, finished = collect(generate(pair, REQUEST, DecodeConfig(method="llm", max_new_tokens=64)))
    assert EOT_ID in finished.token_ids[:-1]  # the reply went on past the end of its turn


class _ListStore:
    """The service's GenerationStore protocol, in memory."""

    def save_history(self, history):
        return 1

    def save_generation(self, generation):
        return 1

    def save_comparison(self, comparison):
        return 1


def test_the_app_service_generates_on_the_qwen3_pairing_and_audits_the_prompt_it_sent(hub_cache, url):
    from specsteer.service.app_service import AppService
    from specsteer.service.events import Done
    from specsteer.service.pair_catalog import PairCatalog
    from specsteer.stores.generations import NamedHistory

    cache_qwen3_pairing(hub_cache)
    service = AppService(store=_ListStore(), runs=storage.SqlRunStore(url), pairs=PairCatalog())
    history = NamedHistory(parse_history(sample_history_path("review").read_bytes(), filename="r.jsonl"), "sample")
    *_, done = service.generate(
        history, "review", REQUEST.input_text, {"pairing": QWEN3_PAIRING, "method": "specsteer", "max_new_tokens": 8}
    )
    assert isinstance(done, Done), done
    sent = done.result.finished.transcript[0].payload["prompt"]
    assert models.load_tokenizer(PAIRINGS[QWEN3_PAIRING].specialist).decode(sent).endswith(CLOSED_THINKING)
    # The audit rebuilds the plain prompt with the pair's format: a mismatch would be reported as a problem.
    assert done.result.privacy.audit.ok, done.result.privacy.audit.problems
