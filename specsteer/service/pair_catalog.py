"""The pairings the service may load, and what it says of them: whether one can load here, which runtime
"auto" picks for it and why, how a sentence names it, and why a Cloud serving another cannot verify for it.

:class:`PairCatalog` is the registry's pairings plus the test pairs the composition root adds (``app.py``,
``specsteer.service.pairings.catalog``); every load the service starts goes through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from specsteer.engine.settings import sentence
from specsteer.models.loading import load_pair
from specsteer.models.pair import LoadedPair
from specsteer.models.planning import runtime_plan
from specsteer.models.registry import DEFAULT_PAIRING, PAIRINGS, Pairing, model_status, pairing_status
from specsteer.models.weights import ModelLoadError
from specsteer.runtimes.placement import Placement


class PairingUnavailable(ValueError):
    """The chosen pairing cannot load here; the message says why and what to choose instead."""


@dataclass(frozen=True)
class PairCatalog:
    """The pairings the service may load: the registry's, plus ``test_pairs`` (id -> builder) that
    tests and the app's test mode add; those run on transformers only. ``placement``: where the
    transformers runtime puts the registry's models (the CPU unless the app found a GPU: ``Placement.detect``);
    the test pairs stay fp32 on the CPU."""

    test_pairs: Mapping[str, Callable[[], LoadedPair]] = field(default_factory=dict)
    placement: Placement = Placement()

    def status(self, pairing_id: str, edge_only: bool = False) -> tuple[bool, str]:
        """(can load here, why or why not); ``edge_only``: only the Specialist is needed (a remote Cloud)."""
        if pairing_id in self.test_pairs:
            return True, "random test models, built in about a second"
        pairing = PAIRINGS.get(pairing_id)
        if pairing is None:
            return False, f"there is no pairing {pairing_id!r}"
        return _status(pairing, edge_only)

    def check(self, pairing_id: str, edge_only: bool = False) -> None:
        """Raise :class:`PairingUnavailable` with a message to act on unless the pairing can load now
        (``edge_only``: its Specialist, for an Edge whose Cloud runs elsewhere)."""
        if pairing_id in self.test_pairs:
            return
        pairing = PAIRINGS.get(pairing_id)
        if pairing is None:
            raise PairingUnavailable(f"Unknown pairing {pairing_id!r}. Choose one from the list.")
        available, reason = _status(pairing, edge_only)
        if not available:
            raise PairingUnavailable(
                sentence(
                    f"The pairing “{pairing.label}” is unavailable here: {reason}. "
                    f"Choose an available pairing, e.g. “{PAIRINGS[DEFAULT_PAIRING].label}”"
                )
            )

    def runtime_note(self, pairing_id: str) -> str:
        """Which runtime "auto" picks for the pairing on this machine, and why, in a sentence or two."""
        if pairing_id in self.test_pairs:
            return "Auto runs the test pair on transformers: its random models exist only as PyTorch weights."
        pairing = PAIRINGS.get(pairing_id)
        if pairing is None:
            return "Choose a pairing to see which runtime auto picks."
        reasons: list[str] = []
        plan = runtime_plan(pairing, "auto", progress=reasons.append)  # for SpecSteer, the app's method
        chosen = plan.runtime
        if plan.mixed:
            return sentence(
                f"Auto splits the streams here: the Specialist and its generic copy on {plan.specialist.runtime} "
                f"(one runtime and weights file for both, or their ratio would carry quantization noise), the "
                f"Generalist on {plan.generalist.runtime}. The Specialist pair {plan.specialist.reason}; the "
                f"Generalist {plan.generalist.reason}"
            )
        if chosen == "transformers" and self.placement.on_gpu:
            return (
                f"Auto picks transformers here: it runs the models on {self.placement.describe()}; this app's "
                "llama.cpp is the CPU build, so it is not used while a GPU is present."
            )
        measured = _measured_choice(pairing) if not plan.reader else ""  # its reason names the prompt reader
        if chosen == "llama.cpp":
            return (
                "Auto picks llama.cpp here: both models are GGUF files, there is no GPU and llama.cpp works on "
                "this machine, so it runs the 4-bit files as they are (transformers would run a dequantized "
                f"copy).{measured or f' ({plan.reason})'}"
            )
        if reasons:  # llama.cpp was wanted, but is not installed or does not work here
            return sentence(f"Auto picks transformers here: {reasons[0]}")
        if any(spec.kind not in ("offline", "gguf") for spec in (pairing.specialist, pairing.generalist)):
            return "Auto picks transformers: these models are not GGUF files, and llama.cpp reads only those."
        if measured:
            return f"Auto picks transformers here for SpecSteer.{measured}"
        return "Auto picks transformers here: a GPU is present, and transformers runs the models on it."

    def load(
        self,
        pairing_id: str,
        runtime: str,
        progress: Callable[[str], None],
        edge_only: bool = False,
        method: str = "specsteer",
    ) -> LoadedPair:
        """The pair, loaded once; ``edge_only``: the Specialist and its tokenizer alone (the test pairs are
        built whole either way: they are tiny)."""
        build = self.test_pairs.get(pairing_id)
        if build is None:
            return load_pair(
                pairing_id,
                progress=progress,
                runtime=runtime,
                edge_only=edge_only,
                method=method,
                device=self.placement.device,
                dtype=self.placement.dtype,
            )
        if runtime == "llama.cpp":
            raise ModelLoadError("The test pair runs on transformers only; choose auto or transformers.")
        return build()


def _measured_choice(pairing: Pairing) -> str:
    """ " Measured here: …" -- what this machine's calibration says of SpecSteer and of the large model
    alone, or "" when the pairing was not calibrated here."""
    from specsteer.models.calibration import choose, saved_calibration

    calibration = saved_calibration(pairing.id)
    if calibration is None:
        return ""
    usable = tuple(timing.runtime for timing in calibration.timings)
    picks = {method: choose(calibration, method, usable) for method in ("specsteer", "llm")}
    if picks["specsteer"] is None:
        return ""
    note = f" Measured here: {picks['specsteer'].reason}."
    if picks["llm"] is not None and picks["llm"].runtime != picks["specsteer"].runtime:
        note += f" For the large model alone, {picks['llm'].runtime} is faster, and auto uses it there."
    return note


def _status(pairing: Pairing, edge_only: bool) -> tuple[bool, str]:
    if not edge_only or pairing.cross_tokenizer or pairing.separate_tokenizers:
        return pairing_status(pairing)
    return model_status(pairing.specialist)


def pairing_name(pairing_id: str) -> str:
    """A pairing as a sentence names it: its label and id, or the id alone when it is not in the registry."""
    pairing = PAIRINGS.get(pairing_id)
    return f"“{pairing.label}” ({pairing_id})" if pairing is not None else f"“{pairing_id}”"


def pairing_mismatch(cloud: str, served: str, chosen: str) -> str | None:
    """Why a Cloud serving ``served`` cannot verify for ``chosen``, or None when they are the same."""
    if served == chosen:
        return None
    return (
        f"The Cloud at {cloud} serves the pairing {pairing_name(served)}, but the pairing chosen here is "
        f"{pairing_name(chosen)}: the Cloud must verify with the Specialist this Edge drafts with. Choose "
        f"{pairing_name(served)}, or start the Cloud with --pairing {chosen}."
    )
