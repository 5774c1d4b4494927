"""The decoding methods and what the rest of the project needs to know about each, in one table.

The engine dispatches on a method's name; everything that *describes* a method (its label, which
grid parameters it reads, whether it drafts, whether anything leaves the device) is read from
:data:`METHOD_INFO`. The UI, the plots, the benchmark, the evaluation grid and the run summaries
all use this table, so they cannot label a method differently or disagree on whether it takes α.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodInfo:
    """One decoding method, as the engine names it and as people see it."""

    name: str  # the engine's id, e.g. "slm+"
    label: str  # short display name for tables, plots and output titles, e.g. "SLM+"
    tagline: str  # a few words that tell it apart in a method picker
    description: str  # one sentence for someone choosing a method
    takes_alpha: bool  # reads α, the verification threshold
    takes_beta: bool  # reads β, the steering strength
    speculative: bool  # drafts k tokens on the device for the cloud to verify (reads the draft length)
    device_only: bool  # runs entirely on the device: nothing crosses the link
    models: str = "both"  # which models it runs: "specialist", "generalist" or "both"
    reads_history: bool = True  # whether a model it runs reads the retrieved private history
    # sends the Specialist's private prompt (profile and history) to the cloud: the privacy-violating reference
    sends_private_context: bool = False
    cloud_decodes: bool = False  # the cloud chooses every token and streams them down (the edge sends none)
    # the roles reversed (P³): the cloud drafts k tokens, the device keeps or corrects them and sends back the
    # tokens it kept and its corrections (reads P³'s own draft length and tau, not α or the draft length)
    cloud_drafts: bool = False

    @property
    def edge_sends_tokens(self) -> bool:
        """The Edge sends the ids it drafts or chooses (accepted, rejected, recovered, bonus, steered)."""
        return not self.device_only and not self.cloud_decodes

    @property
    def choice_label(self) -> str:
        """The label in a method picker: the short label and its tagline."""
        return f"{self.label} — {self.tagline}"


_TABLE = (
    MethodInfo(
        "slm",
        "SLM",
        "small model alone",
        "The small on-device model alone, without your history.",
        takes_alpha=False,
        takes_beta=False,
        speculative=False,
        device_only=True,
        models="specialist",
        reads_history=False,
    ),
    MethodInfo(
        "slm+",
        "SLM+",
        "small model with your history",
        "The small on-device model with your retrieved history; nothing is sent anywhere.",
        takes_alpha=False,
        takes_beta=False,
        speculative=False,
        device_only=True,
        models="specialist",
    ),
    MethodInfo(
        "llm",
        "LLM",
        "large model alone",
        "The large cloud model alone, without your history (the speed reference).",
        takes_alpha=False,
        takes_beta=False,
        speculative=False,
        device_only=False,
        models="generalist",
        reads_history=False,
        cloud_decodes=True,
    ),
    MethodInfo(
        "llm+",
        "LLM+ (sends your data)",
        "large model given your history: sends it to the cloud",
        "The large cloud model given your private prompt (profile and history): what sending your data "
        "to the cloud would give. Not private; the reference for quality and the worst case for privacy.",
        takes_alpha=False,
        takes_beta=False,
        speculative=False,
        device_only=False,
        models="generalist",
        sends_private_context=True,
        cloud_decodes=True,
    ),
    MethodInfo(
        "sd",
        "Standard SD",
        "drafts follow the large model",
        "Speculative decoding towards the large model: the output follows it, drafts only speed it up.",
        takes_alpha=False,
        takes_beta=False,
        speculative=True,
        device_only=False,
    ),
    MethodInfo(
        "lightcosteer",
        "LightCoSteer",
        "steered at every token",
        "Steered logits (large model + β × personal delta) at every token, no drafting.",
        takes_alpha=False,
        takes_beta=True,
        speculative=False,
        device_only=False,
    ),
    MethodInfo(
        "costeer",
        "CoSteer",
        "iterative steering, slow",
        "CoSteer's iterative per-token steering: accurate but slow.",
        # Its steering strength is its own λ (it converges to β = 1/λ); β has no effect on it.
        takes_alpha=False,
        takes_beta=False,
        speculative=False,
        device_only=False,
    ),
    MethodInfo(
        "p3",
        "P³",
        "cloud drafts, device corrects",
        "The reverse protocol (Salemi & Zamani): the cloud drafts from your input alone; the device, with "
        "your history, keeps each draft it finds likely enough (p / max p >= τ) and corrects the first it does not.",
        takes_alpha=False,
        takes_beta=False,
        speculative=False,
        device_only=False,
        cloud_drafts=True,
    ),
    MethodInfo(
        "specsteer",
        "SpecSteer",
        "ours",
        "The device drafts with your history; the cloud verifies the drafts without seeing it.",
        takes_alpha=True,
        takes_beta=True,
        speculative=True,
        device_only=False,
    ),
)

METHOD_INFO: dict[str, MethodInfo] = {info.name: info for info in _TABLE}
METHODS: tuple[str, ...] = tuple(METHOD_INFO)  # the engine's order: baselines first, SpecSteer last

# Every method that keeps the private context on the device: what a grid runs unless llm+ is asked for by name.
PRIVATE_METHODS: tuple[str, ...] = tuple(name for name in METHODS if not METHOD_INFO[name].sends_private_context)
SPEED_REFERENCE = "llm"  # speedups are measured against it (1.00×), in the same run
# What a personalized method has to beat: the most personal method and the strongest generic one.
BASELINES = ("slm+", "llm")
CORE_METHODS = (*BASELINES, "specsteer")  # the paper's core comparison


def method_info(name: str) -> MethodInfo:
    """The table's entry for ``name``; ValueError naming the known methods otherwise."""
    try:
        return METHOD_INFO[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(METHODS)}") from None


def method_label(name: str) -> str:
    """The display label; a name the table does not know (e.g. from another version's rows) is shown as is."""
    info = METHOD_INFO.get(name)
    return info.label if info is not None else name


def acceptance_label(cda_lambda: float | None) -> str:
    """How a setting names SpecSteer's acceptance rule: "" for the fixed α (the default, left unsaid), "CDA λ=1"
    for divergence-adaptive acceptance at λ = 1 (specsteer.method.acceptance)."""
    return "" if cda_lambda is None else f"CDA λ={cda_lambda:g}"
