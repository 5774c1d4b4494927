"""Private facts with a ground truth: which of a user's facts reached the output, and which the Cloud.

A CoGenesis user profile lists, on its ``Privacy_info:`` line, facts the user would not want shared,
separated by ``;`` (:func:`split_private_facts`). :func:`mentions` decides whether a text states one
of them; :func:`expose` checks every fact of a generation against

* the task (the user typed it, and the Cloud gets it by design: a fact named there is not a leak),
* the prompt the Cloud received (none for device-only methods, the plain prompt for the others, the
  Specialist's whole private prompt for ``llm+``),
* every token id the Edge sent (``GenerationStats.sent_text``: drafts, accepted or not, and the
  tokens it chose, in the order they crossed), and
* the output.

A fact is *sent to the cloud* when the prompt sent or the sent tokens state it; *sent only in
rejected drafts* when the sent tokens state it but neither the output nor the prompt sent does (it
reached the Cloud although the user never sees it).

The matcher (why it is built this way). A generation rarely copies a fact verbatim: "Recently
celebrated 20th wedding anniversary with a trip to the Maldives" comes back as "our anniversary
trip to the Maldives". So a fact is reduced to its content terms (lower case, a light suffix
stripping so that "celebrated" meets "celebrate", function words and the profile's generic verbs
such as "enjoys" or "regularly" left out), and a text states the fact when one window of the text
(:data:`WINDOW_SLACK` content words longer than the fact) holds at least :data:`COVERAGE` of the
fact's terms, and never fewer than two (one for a one-term fact). Numbers count as terms. The
choice of terms and thresholds was measured on a hand-labelled sample
(``tests/fixtures/fact_matcher_sample.json``; precision and recall in ``docs/research/COGENESIS.md``,
checked by ``tests/test_facts.py``). The matcher is lexical: a paraphrase with no shared content
word is missed, and two texts can share terms by chance; read the counts as estimates.

Light: imports nothing heavy (the data loader and the storage layer may use it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from specsteer.method.catalog import method_info
from specsteer.data.tasks import PromptPair

PRIVACY_KEY = "privacy_info"
COVERAGE = 0.35  # share of a fact's content terms one window of the text must hold
WINDOW_SLACK = 12  # a window is the fact's term count plus this many content words


_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# Function words: never the content of a fact (the history-crossing audit, data.crossing, shares them).
STOPWORDS = frozenset(
    """
a about above after again against all also am an and any are as at be been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here
hers herself him himself his how i if in into is it its itself just me more most my myself no nor not of off
on once only or other our ours out over own same she should so some such than that the their theirs them
then there these they this those through to too under until up upon very was we were what when where which
while who whom why will with would you your yours via per within without
""".split()
)
# Words the profiles use to introduce a fact, not the fact itself ("Enjoys attending ...").
_GENERIC = frozenset(
    """
enjoy enjoys enjoyed enjoying love loves loved like likes liked often regularly recent recently currently
usually always sometimes occasionally frequently every weekly daily monthly yearly year years time times
keep keeps kept use uses used using make makes made take takes took go goes went going has have get gets
secretly privately personal private plan plans planning planned attend attends attended attending
participate participates participated participating involve involved work works working worked start
starts started starting one two new local various several many much well part recently past current
""".split()
)
_SUFFIXES = ("ingly", "ings", "ing", "edly", "ied", "ies", "ed", "es", "ly", "s")


def split_private_facts(profile: str) -> tuple[str, ...]:
    """The facts of a profile's ``Privacy_info:`` line, split at ``;``, stripped, empty ones dropped.

    A profile without that line has none."""
    for line in profile.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip().lower() == PRIVACY_KEY:
            return tuple(fact.strip().rstrip(".") for fact in value.split(";") if fact.strip())
    return ()


def stem(word: str) -> str:
    """A light suffix stripping ("celebrated" -> "celebrat", "workshops" -> "workshop"); words of
    four letters or fewer and numbers stay as they are."""
    if len(word) <= 4 or word.isdigit():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def _is_content(word: str) -> bool:
    return word not in STOPWORDS and word not in _GENERIC and (len(word) >= 3 or any(c.isdigit() for c in word))


def content_terms(text: str) -> list[str]:
    """The text's content words, stemmed, in order (repeats kept: a window counts positions)."""
    words = _WORD.findall(text.lower().replace("\u2019", "'"))
    return [stem(word.removesuffix("'s")) for word in words if _is_content(word.removesuffix("'s"))]


def fact_terms(fact: str) -> tuple[str, ...]:
    """A fact's distinct content terms, in order."""
    return tuple(dict.fromkeys(content_terms(fact)))


def mentions(fact: str, text: str) -> bool:
    """Whether ``text`` states ``fact`` (see the module doc for the rule and its limits)."""
    terms = fact_terms(fact)
    if not terms or not text:
        return False
    wanted = set(terms)
    needed = max(min(2, len(terms)), math.ceil(COVERAGE * len(terms)))
    words = content_terms(text)
    window = len(terms) + WINDOW_SLACK
    # Slide a window over the text's content words, counting the fact's terms present in it.
    for start in range(max(1, len(words) - window + 1)):
        if len(wanted.intersection(words[start : start + window])) >= needed:
            return True
    return False


def method_exposure(method: str, facts: Sequence[str], prompts: PromptPair, sent: str, output: str) -> FactExposure:
    """:func:`expose` for one generation of ``method``: the prompt the Cloud received follows from the
    method (none on the device, the plain one, or the private one for ``llm+``); ``sent`` is the
    generation's ``GenerationStats.sent_text``; the task is the plain prompt (what the user typed)."""
    info = method_info(method)
    prompt_sent = None if info.device_only else (prompts.private if info.sends_private_context else prompts.plain)
    return expose(facts, prompts.plain, prompt_sent, sent, output, private_prompt_sent=info.sends_private_context)


@dataclass(frozen=True)
class FactExposure:
    """Where each private fact of one generation appeared (one flag per fact, in the facts' order)."""

    facts: tuple[str, ...]
    in_task: tuple[bool, ...]  # the task names it: the user sent it themselves
    in_output: tuple[bool, ...]
    sent: tuple[bool, ...]  # in what the Cloud received: the prompt sent or the Edge's sent tokens
    rejected_only: tuple[bool, ...]  # sent, yet in neither the output nor the prompt sent
    private_prompt_sent: bool = False  # the method sent the Specialist's whole private prompt (llm+)

    @property
    def total(self) -> int:
        return len(self.facts)

    @property
    def sent_facts(self) -> tuple[str, ...]:
        return tuple(fact for fact, flag in zip(self.facts, self.sent, strict=True) if flag)

    @property
    def sent_beyond_task(self) -> tuple[str, ...]:
        """Sent facts the task itself did not name: what the method added to what the user sent."""
        return tuple(
            fact for fact, flag, task in zip(self.facts, self.sent, self.in_task, strict=True) if flag and not task
        )

    @property
    def rejected_only_facts(self) -> tuple[str, ...]:
        return tuple(fact for fact, flag in zip(self.facts, self.rejected_only, strict=True) if flag)

    def headline(self) -> str:
        """ "2 of 7 private facts were sent to the cloud" and where they came from, in one sentence."""
        sent = len(self.sent_facts)
        noun = "fact was" if sent == 1 and self.total == 1 else "facts were"
        text = f"{sent} of {self.total} private {noun} sent to the cloud"
        if self.private_prompt_sent:
            return text + " (this method sends your whole private context, profile and history, to the cloud)"
        named = sum(1 for flag, task in zip(self.sent, self.in_task, strict=True) if flag and task)
        notes = []
        if named:
            notes.append(f"{named} of them named in the task you typed")
        if any(self.rejected_only):
            notes.append(f"{sum(self.rejected_only)} only in rejected drafts, which you never see")
        return text + (f" ({'; '.join(notes)})" if notes else "")


def expose(
    facts: Sequence[str], task: str, prompt_sent: str | None, sent: str, output: str, private_prompt_sent: bool = False
) -> FactExposure:
    """Check every fact against the task, the prompt the Cloud received (None: none), the text of
    the tokens the Edge sent, and the output."""
    facts = tuple(facts)
    in_task = tuple(mentions(fact, task) for fact in facts)
    in_prompt = tuple(prompt_sent is not None and mentions(fact, prompt_sent) for fact in facts)
    in_sent = tuple(mentions(fact, sent) for fact in facts)
    in_output = tuple(mentions(fact, output) for fact in facts)
    return FactExposure(
        facts=facts,
        in_task=in_task,
        in_output=in_output,
        sent=tuple(p or s for p, s in zip(in_prompt, in_sent, strict=True)),
        rejected_only=tuple(s and not o and not p for p, s, o in zip(in_prompt, in_sent, in_output, strict=True)),
        private_prompt_sent=private_prompt_sent,
    )


@dataclass(frozen=True)
class FactShares:
    """A set of generations' exposure: shares of all their private facts (0-1)."""

    generations: int
    facts: int
    sent: float
    sent_beyond_task: float  # of the facts the task did not name, the share sent
    in_output: float
    rejected_only: float


def fact_shares(exposures: Sequence[FactExposure]) -> FactShares | None:
    """Pooled over every fact of every generation; None without a fact."""
    total = sum(exposure.total for exposure in exposures)
    if not total:
        return None
    not_in_task = sum(exposure.total - sum(exposure.in_task) for exposure in exposures)
    return FactShares(
        generations=len(exposures),
        facts=total,
        sent=sum(sum(e.sent) for e in exposures) / total,
        sent_beyond_task=(sum(len(e.sent_beyond_task) for e in exposures) / not_in_task) if not_in_task else 0.0,
        in_output=sum(sum(e.in_output) for e in exposures) / total,
        rejected_only=sum(sum(e.rejected_only) for e in exposures) / total,
    )
