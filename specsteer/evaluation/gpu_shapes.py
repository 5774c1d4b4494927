"""The paper's model pairs as shapes (``SHAPES``, ``PAIRS``), their tiny stand-ins for a CPU dry run, and a model of
a shape built with random weights on the device itself.

What ``specsteer.evaluation.gpu_costs`` times and what ``benchmarks/engine_bench.py`` runs the engine on: one
catalogue of shapes for both. It imports only the standard library (torch and transformers are passed in by the
caller), so a bare GPU machine with the repository can use it.
"""

from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------- the shapes
#
# The values of each model's public config.json on the Hugging Face hub (the repositories
# specsteer/models/registry.py names for the paper's pairings). Only what sets a pass's cost is kept:
# widths, depths, head counts, vocabulary, whether the output matrix is the embedding's (tied),
# and the attention biases Qwen2 has. Rotary settings and norm epsilons are left at the library's
# defaults: they change no kernel's size (the rotary frequencies are computed once, at build).


@dataclass(frozen=True)
class Shape:
    family: str  # "qwen3" | "qwen2" | "llama": which transformers class builds it
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    source: str

    def parameters(self) -> int:
        """Parameter count from the shape (embeddings, attention, MLP, norms, the output matrix)."""
        h, heads, kv, d = self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        attention = h * heads * d + 2 * h * kv * d + heads * d * h
        if self.family == "qwen2":
            attention += heads * d + 2 * kv * d  # q/k/v biases
        if self.family == "qwen3":
            attention += 2 * d  # q_norm, k_norm
        layer = attention + 3 * h * self.intermediate_size + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + embeddings + h


def _hub(repo: str) -> str:
    return f"config.json of {repo} on the Hugging Face hub, https://huggingface.co/{repo}/blob/main/config.json"


SHAPES: dict[str, Shape] = {
    "Qwen3-0.6B": Shape("qwen3", 1024, 28, 16, 8, 128, 3072, 151936, True, _hub("Qwen/Qwen3-0.6B")),
    "Qwen3-32B": Shape("qwen3", 5120, 64, 64, 8, 128, 25600, 151936, False, _hub("Qwen/Qwen3-32B")),
    "Qwen2.5-1.5B": Shape("qwen2", 1536, 28, 12, 2, 128, 8960, 151936, True, _hub("Qwen/Qwen2.5-1.5B-Instruct")),
    "Qwen2.5-32B": Shape("qwen2", 5120, 64, 40, 8, 128, 27648, 152064, False, _hub("Qwen/Qwen2.5-32B-Instruct")),
    "Llama-3.2-1B": Shape("llama", 2048, 16, 32, 8, 64, 8192, 128256, True, _hub("meta-llama/Llama-3.2-1B-Instruct")),
    "Llama-3.1-8B": Shape(
        "llama", 4096, 32, 32, 8, 128, 14336, 128256, False, _hub("meta-llama/Llama-3.1-8B-Instruct")
    ),
}

# The paper's pairs: (device Specialist, cloud Generalist). In the Cloud both run: the Generalist
# verifies, and the small model is the generic Specialist.
PAIRS: dict[str, tuple[str, str]] = {
    "qwen3": ("Qwen3-0.6B", "Qwen3-32B"),
    "qwen2.5": ("Qwen2.5-1.5B", "Qwen2.5-32B"),
    "llama3": ("Llama-3.2-1B", "Llama-3.1-8B"),
}

_TINY_SOURCE = "tiny shape of the same family for the CPU dry run (not a real model's shape)"


def tiny_shape(name: str) -> Shape:
    """A tiny model of the family of ``name`` (the large one of a pair twice as wide and deep)."""
    real = SHAPES[name]
    large = name in {large for _, large in PAIRS.values()}
    scale = 2 if large else 1
    return Shape(
        real.family,
        hidden_size=64 * scale,
        num_hidden_layers=2 * scale,
        num_attention_heads=4 * scale,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128 * scale,
        vocab_size=512,
        tie_word_embeddings=real.tie_word_embeddings,
        source=f"{_TINY_SOURCE}; stands in for {name}",
    )


# --------------------------------------------------------------------------- building a model


def model_config(shape: Shape, transformers):
    common = dict(
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        intermediate_size=shape.intermediate_size,
        vocab_size=shape.vocab_size,
        tie_word_embeddings=shape.tie_word_embeddings,
        max_position_embeddings=32768,
        use_cache=True,
    )
    if shape.family == "qwen3":
        return transformers.Qwen3Config(head_dim=shape.head_dim, **common)
    if shape.family == "qwen2":
        if shape.head_dim != shape.hidden_size // shape.num_attention_heads:
            raise ValueError("Qwen2 derives its head size from the hidden size")
        return transformers.Qwen2Config(**common)
    if shape.family == "llama":
        return transformers.LlamaConfig(head_dim=shape.head_dim, **common)
    raise ValueError(f"unknown family {shape.family!r}")


def build_model(shape: Shape, device: str, dtype, torch, transformers):
    """The model with random weights, created on ``device`` directly.

    The model is constructed under the device as the default device and the dtype as the default
    dtype, so every parameter is allocated once, where it runs, and initialised there by the modules'
    own random init (a 32B model never passes through host memory). (A meta-device build followed by
    ``to_empty`` would leave the rotary frequency buffers, computed in the constructor, empty.)
    """
    config = model_config(shape, transformers)
    config._attn_implementation = "sdpa"
    if int(transformers.__version__.split(".")[0]) >= 5:
        config.dtype = dtype
    else:
        config.torch_dtype = dtype
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    for name, parameter in model.named_parameters():
        # Checked, not converted: a model built in float32 would have needed twice the memory already.
        if parameter.dtype != dtype or parameter.device.type != torch.device(device).type:
            raise RuntimeError(f"{name} was built as {parameter.dtype} on {parameter.device}, not {dtype} on {device}")
        if not torch.isfinite(parameter).all():
            raise RuntimeError(f"random init left a non-finite value in {name}")
    return model


def fits(shape: Shape, device: str, torch) -> str | None:
    """Why a model cannot be built on the device, or None: its weights plus 4 GiB for activations,
    caches and the allocator must fit in the free memory."""
    if not device.startswith("cuda"):
        return None
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    needed = shape.parameters() * 2 + 4 * 2**30
    if needed > free:
        return f"needs about {needed / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
    return None
