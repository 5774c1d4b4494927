"""What every request must pass before the service does any work: settings a caller may use here, a task
input of the size a visitor may send, a request the engine can prepare, and who may do what only the
operator may (:func:`require_operator`).

One :class:`RequestChecks` per service, over the deployment's exposure (which Clouds a caller may use), the
visitor limits and the pair catalog; the generation workflows, the warm-up and campaigns call the same checks.
"""

from __future__ import annotations

from collections.abc import Mapping

from specsteer.data.tasks import TASKS
from specsteer.engine.request import Prepared, Request, prepare
from specsteer.engine.settings import GenerationSettings, SettingsError
from specsteer.protocol.exposure import ADMIN_TOKEN_ENV, Exposure
from specsteer.service.events import ExportRefused
from specsteer.service.limits import VisitorLimits, text_problem
from specsteer.service.pair_catalog import PairCatalog
from specsteer.stores.generations import NamedHistory


def require_operator(exposure: Exposure, token: str, what: str) -> None:
    """ExportRefused unless this caller may do ``what`` (a sentence's subject, e.g. "Creating a campaign"):
    anyone in a local run; on a public app, the holder of the operator's token."""
    if not exposure.may_export_all(token):
        configured = "" if exposure.admin_token else f" No token is configured (${ADMIN_TOKEN_ENV}), so none is."
        raise ExportRefused(f"{what} needs the operator's token on this public app.{configured}")


class RequestChecks:
    """The checks of a request on this deployment; holds no state besides what it is given."""

    def __init__(self, exposure: Exposure, limits: VisitorLimits, pairs: PairCatalog) -> None:
        self.exposure = exposure
        self.limits = limits
        self.pairs = pairs

    def valid(self, settings: GenerationSettings | Mapping[str, object]) -> GenerationSettings:
        """Validated settings whose Cloud this deployment lets its callers use; SettingsError otherwise."""
        valid = (
            settings.validate()
            if isinstance(settings, GenerationSettings)
            else GenerationSettings.from_values(settings)
        )
        problem = self.exposure.cloud_problem(valid.cloud) or self.limits.tokens_problem(valid.max_new_tokens)
        if problem:
            raise SettingsError([problem])
        return valid

    def check_input(self, input_text: object) -> None:
        """SettingsError when the task input is longer than a visitor may send."""
        problem = text_problem("task input", input_text, self.limits.max_input_chars)
        if problem:
            raise SettingsError([problem])

    @staticmethod
    def prepare(history: NamedHistory | None, task: str, input_text: str, settings: GenerationSettings) -> Prepared:
        if task not in TASKS:
            raise SettingsError([f"Choose a task ({', '.join(TASKS)})."])
        if not (input_text or "").strip():
            raise SettingsError(["Enter a task input first."])
        items = history.history.items if history is not None else ()
        profile = history.history.profile if history is not None else None
        return prepare(
            Request(
                task=task,
                input_text=input_text,
                history=items,
                retrieval_k=settings.retrieval_k,
                prompt_style=settings.prompt_style,
                profile=profile,
            )
        )

    def runnable(self, settings: GenerationSettings | Mapping[str, object]) -> GenerationSettings:
        """Validated settings (:meth:`valid`) whose pairing can load here (its Specialist alone, for a remote
        Cloud); SettingsError or PairingUnavailable, both ValueErrors, otherwise."""
        valid = self.valid(settings)
        self.pairs.check(valid.pairing, edge_only=valid.remote)
        return valid

    def operator(self, token: str, what: str) -> None:
        """:func:`require_operator` on this deployment."""
        require_operator(self.exposure, token, what)
