"""What crossed the link in one generation, as its privacy panel shows it: the :class:`PrivacyReport`.

Three readings of a finished generation, each by its own module: the audit of every uplink message against
the prompts the Cloud should have been given (``specsteer.data.privacy``), which of the persona's private
facts reached the Cloud (``specsteer.data.facts``), and which phrases of the history crossed, with the
settings that would guard them (``specsteer.data.crossing_replay``). ``GenerationService`` makes one per
generation before saving it; a method that runs on the device only gets none.
"""

from __future__ import annotations

from collections.abc import Sequence

from specsteer.data.crossing import history_texts
from specsteer.data.crossing_replay import history_crossing
from specsteer.data.facts import method_exposure, split_private_facts
from specsteer.data.privacy import audit_uplink
from specsteer.engine.request import Prepared, chat_ids
from specsteer.engine.settings import GenerationSettings
from specsteer.method.catalog import METHOD_INFO
from specsteer.method.events import Finished, TokenEvent
from specsteer.models.loading import LoadedPair
from specsteer.service.events import PrivacyReport
from specsteer.stores.generations import NamedHistory


def privacy_report(
    history: NamedHistory | None,
    pair: LoadedPair,
    prepared: Prepared,
    tokens: Sequence[TokenEvent],
    finished: Finished,
    settings: GenerationSettings,
) -> PrivacyReport | None:
    """The report of a generation of ``prepared`` on ``pair`` over ``history`` (``tokens``: the settled ones it
    emitted); None for a method that sends nothing to the Cloud."""
    facts = split_private_facts(history.history.profile or "") if history is not None else ()
    texts = history_texts(history.history.items, history.history.profile) if history is not None else []
    if METHOD_INFO[finished.stats.method].device_only:
        return None
    tokenizer = pair.tokenizer
    sends_private = METHOD_INFO[finished.stats.method].sends_private_context
    # The prompt the Cloud should have been given (llm+: the private one), in each model's ids.
    expected = prepared.prompts.private if sends_private else prepared.prompts.plain
    large_ids = chat_ids(pair.cross.tokenizer, expected, pair.cross.chat) if pair.cross else None
    private = chat_ids(tokenizer, prepared.prompts.private, pair.chat) if sends_private else None
    audit = audit_uplink(
        finished.transcript,
        chat_ids(tokenizer, prepared.prompts.plain, pair.chat),
        tokens,
        large_ids,
        private_prompt_ids=private,
    )
    exposure = (
        method_exposure(finished.stats.method, facts, prepared.prompts, finished.stats.sent_text, finished.text)
        if facts
        else None
    )
    crossing = history_crossing(finished, tokens, tokenizer, texts, prepared.prompts.plain, settings.private_guard)
    return PrivacyReport(
        audit,
        tuple(finished.transcript),
        lambda ids: str(tokenizer.decode(list(ids), skip_special_tokens=False)),
        exposure,
        crossing,
        settings.guarded() if crossing.crossed else None,
    )
