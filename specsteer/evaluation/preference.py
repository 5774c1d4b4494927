"""What annotators' judgements add up to: every statistic of the app's judgements, in one module.

One cohesive module, though longer than most: every statistic here reads the same judgement (the methods shown
in the order shown, what was preferred, the ratings) with the same checks and the same vocabulary (the special
preferences of ``specsteer.stores.generations``), and the Compare tab's summary and a campaign's report share
their tallies and their agreement. Pure: numpy and the standard library only (no torch, no database, no
gradio, no service), so every statistic is tested on hand-made judgements.

A campaign's store keeps :class:`CampaignJudgement` values; :func:`preference_report` turns any collection of
them (one campaign, or several with distinct comparison ids) into:

* **Pairwise outcomes** (:func:`pairwise_outcomes`). A judgement that prefers one slot is read as that
  slot's method beating every other method shown; it says nothing about the others among themselves.
  A judgement of tie, all good or all bad is read as half a win each way for every pair shown (the three
  mean different things to a reader, and are counted apart on the leaderboard, but none ranks one method
  above another). If annotators choose by Luce's rule (P(i chosen) proportional to g_i among those shown),
  this reading keeps the Bradley–Terry likelihood equations unbiased at the true strengths, so the fit is
  consistent for comparisons of any size; the pairs of one judgement are not independent, which the
  bootstrap below accounts for.
* **Bradley–Terry strengths** (:func:`bradley_terry`): P(i beats j) = g_i / (g_i + g_j), fitted to the
  pairwise outcomes by maximum likelihood (damped Newton steps on log g).
  Strengths are reported as natural logarithms, anchored so their mean is 0: a difference d between two
  methods means odds of e^d to 1 that the first is preferred (an Elo score is 400 / ln 10 ≈ 173.7 times
  this, plus any offset). A method that never lost has no finite maximum-likelihood strength, so the fit
  adds ``prior_games`` virtual tied games (default one: half a win each way) between every pair of methods.
  For two methods this is exactly the Haldane–Anscombe correction: strength difference
  log((w + 1/2) / (l + 1/2)) instead of log(w / l). It also joins methods that were never shown together
  (their difference then rests on the other comparisons, and on the prior where there are none), and it
  weighs as one game against the dozens a leaderboard needs, so it fades as judgements accumulate.
* **Bootstrap intervals** resample whole comparisons with replacement (every annotator's judgement of a
  comparison goes along with it), not single votes or pairs: the pairs broken out of one judgement, and
  several annotators' judgements of the same outputs, are not independent, and resampling them one by
  one would make the intervals too narrow. Percentile intervals, seeded, vectorised over resamples.
* **Position bias** (:func:`position_bias`): how often each slot (A, B, …) was preferred, with a Wilson
  interval, against the rate expected if position did not matter. It measures position as such only when
  methods are assigned to slots at random (or balanced), as a campaign's blind order per annotator does;
  with a fixed order it mixes position with method.
* **Agreement**: Fleiss' κ on the preferred method (:func:`fleiss_agreement`, the methods and the special
  preferences as categories), and Krippendorff's α with the interval metric for each rating criterion
  (:func:`rating_agreement`), missing ratings allowed.
* **Annotators** (:func:`annotator_activity`): judgements per annotator and median seconds per judgement.

The Compare tab's quick judgements (``specsteer.stores.generations.Judgement``, one per page session and
comparison) add up to :func:`summarize_annotations`: the same tallies per method (:func:`preference_tallies`),
mean ratings, and the same agreement, between page sessions.

The input is one judgement per annotator per comparison (the store keeps the latest); a duplicate, or a
comparison id shown with different methods, is refused rather than guessed at.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from specsteer.stores.campaigns import StoredCampaignJudgement
from specsteer.stores.generations import (
    MAX_COMPARISON_OUTPUTS,
    SPECIAL_PREFERENCES,
    Agreement,
    AnnotationSummary,
    Judgement,
    MethodJudgements,
    SpecialPreference,
    slot_label,
)

Preference = int | SpecialPreference  # a slot (0 is label A), or one of the special preferences

DEFAULT_RESAMPLES = 1000
MAX_RESAMPLES = 20_000  # a bound on the work one request can ask for
DEFAULT_PRIOR_GAMES = 1.0
_RESAMPLE_CELLS_PER_BATCH = 2_000_000  # bounds memory: a batch holds resamples × comparisons counts
_NEWTON_TOLERANCE = 1e-10  # largest Newton step of a log strength at convergence
_NEWTON_MAX_ITERATIONS = 200
_NO_FINITE_FIT = "no finite maximum-likelihood strengths (a method never won or never lost); use prior_games > 0"


# --------------------------------------------------------------------------- the judgement


@dataclass(frozen=True)
class CampaignJudgement:
    """One annotator's judgement of one comparison of a campaign.

    ``slots`` are the methods in the order this annotator saw them (slot 0 is label A); ``preference``
    is a slot index or "tie", "all_good", "all_bad". ``ratings``, when given, has one mapping per slot
    (criterion -> score); a criterion left out is not rated (the range of scores is the store's to check).
    ``seconds`` is the time from display to save.
    """

    comparison_id: int
    annotator: str
    slots: tuple[str, ...]
    preference: Preference
    ratings: tuple[Mapping[str, float], ...] = ()
    seconds: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.comparison_id, bool) or not isinstance(self.comparison_id, int):
            raise ValueError(f"comparison id must be an integer, not {self.comparison_id!r}")
        if not isinstance(self.annotator, str) or not self.annotator.strip():
            raise ValueError("annotator must be a non-empty string")
        if not isinstance(self.slots, tuple) or not 2 <= len(self.slots) <= MAX_COMPARISON_OUTPUTS:
            raise ValueError(f"a comparison shows 2 to {MAX_COMPARISON_OUTPUTS} methods as a tuple, not {self.slots!r}")
        if not all(isinstance(method, str) and method for method in self.slots):
            raise ValueError(f"every slot must name a method: {self.slots!r}")
        if len(set(self.slots)) != len(self.slots):
            raise ValueError(f"a method is shown twice: {self.slots!r}")
        if isinstance(self.preference, bool) or not (
            (isinstance(self.preference, int) and 0 <= self.preference < len(self.slots))
            or self.preference in SPECIAL_PREFERENCES
        ):
            raise ValueError(
                f"preference must be a slot from 0 to {len(self.slots) - 1} or one of {SPECIAL_PREFERENCES}, "
                f"not {self.preference!r}"
            )
        if self.ratings and len(self.ratings) != len(self.slots):
            raise ValueError(f"ratings must give one mapping per slot ({len(self.slots)}), not {len(self.ratings)}")
        for scores in self.ratings:
            for criterion, score in scores.items():
                if not isinstance(criterion, str) or not criterion:
                    raise ValueError(f"a rating criterion must be a non-empty string, not {criterion!r}")
                if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
                    raise ValueError(f"rating {criterion!r} must be a finite number, not {score!r}")
        if self.seconds is not None and (
            isinstance(self.seconds, bool)
            or not isinstance(self.seconds, int | float)
            or not math.isfinite(self.seconds)
            or self.seconds < 0
        ):
            raise ValueError(f"seconds must be a finite number >= 0 or None, not {self.seconds!r}")

    @property
    def preferred_method(self) -> str | None:
        """The method preferred, or None for tie, all good and all bad."""
        return self.slots[self.preference] if isinstance(self.preference, int) else None

    @property
    def category(self) -> str:
        """What the annotator chose, as agreement counts it: the method preferred, or the special preference."""
        return self.slots[self.preference] if isinstance(self.preference, int) else self.preference


def parse_preference(text: str, slots: Sequence[str]) -> Preference:
    """A preference as typed or sent: a slot's label ("B"), a method shown, or a special preference."""
    if text in SPECIAL_PREFERENCES:
        return text
    if len(text) == 1 and "A" <= text <= "Z" and ord(text) - ord("A") < len(slots):
        return ord(text) - ord("A")
    if text in slots:
        return list(slots).index(text)
    raise ValueError(
        f"unknown preference {text[:40]!r}: expected a label from A to {slot_label(len(slots) - 1)}, "
        f"a method shown, or one of {SPECIAL_PREFERENCES}"
    )


def from_judgements(judgements: Iterable[Judgement]) -> list[CampaignJudgement]:
    """The Compare tab's judgements (``specsteer.stores.generations.Judgement``) as campaign judgements, without
    times: each judge's latest of a comparison (:func:`latest_judgements`), the judge (``Judgement.judge``, a page
    session or a name) as the annotator."""
    converted = []
    for judgement in latest_judgements(judgements):
        slots = tuple(judgement.display_order)
        chosen = judgement.preferred_method
        if chosen not in SPECIAL_PREFERENCES and chosen not in slots:
            raise ValueError(f"judgement {judgement.id} prefers {chosen[:40]!r}, which its comparison did not show")
        converted.append(
            CampaignJudgement(
                comparison_id=judgement.comparison_id,
                annotator=":".join(judgement.judge),
                slots=slots,
                preference=chosen if chosen in SPECIAL_PREFERENCES else slots.index(chosen),
                ratings=tuple(dict(judgement.ratings.get(method, {})) for method in slots) if judgement.ratings else (),
            )
        )
    return converted


def as_campaign_judgement(judgement: StoredCampaignJudgement) -> CampaignJudgement:
    """A campaign's stored judgement as the statistics read it (slot index or special preference, ratings per
    slot)."""
    slots = tuple(judgement.slots)
    return CampaignJudgement(
        comparison_id=judgement.comparison_id,
        annotator=judgement.annotator,
        slots=slots,
        preference=parse_preference(judgement.preference, slots),
        ratings=tuple(dict(judgement.ratings.get(method, {})) for method in slots),
        seconds=judgement.seconds,
    )


def _checked(judgements: Iterable[CampaignJudgement]) -> list[CampaignJudgement]:
    """The judgements as a list, refused if one annotator judged a comparison twice or a comparison's methods differ."""
    listed = list(judgements)
    seen: set[tuple[int, str]] = set()
    methods_of: dict[int, frozenset[str]] = {}
    for judgement in listed:
        if not isinstance(judgement, CampaignJudgement):
            raise ValueError(f"expected CampaignJudgement values, not {type(judgement).__name__}")
        key = (judgement.comparison_id, judgement.annotator)
        if key in seen:
            raise ValueError(
                f"annotator {judgement.annotator!r} judged comparison {judgement.comparison_id} twice; "
                "pass only the latest judgement"
            )
        seen.add(key)
        shown = frozenset(judgement.slots)
        if methods_of.setdefault(judgement.comparison_id, shown) != shown:
            raise ValueError(
                f"comparison {judgement.comparison_id} is shown with different methods "
                f"({sorted(methods_of[judgement.comparison_id])} and {sorted(shown)}): are ids from two campaigns mixed?"
            )
    return listed


def _method_order(judgements: Sequence[CampaignJudgement], methods: Iterable[str]) -> tuple[str, ...]:
    listed = set(methods)
    if not all(isinstance(method, str) and method for method in listed):
        raise ValueError("methods must be non-empty strings")
    return tuple(sorted(listed | {method for judgement in judgements for method in judgement.slots}))


# --------------------------------------------------------------------------- tallies per method


def preference_tallies(choices: Iterable[tuple[Sequence[str], str]]) -> dict[str, Counter[str]]:
    """Per method, over (the methods a judgement showed, what it chose: a method or a special preference) pairs:
    the judgements that showed it ("judgements"), preferred it ("wins"), preferred another ("losses"), and chose
    each special preference while it was shown (counted under that preference's name)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for shown, chosen in choices:
        for method in shown:
            counts[method]["judgements"] += 1
            if chosen in SPECIAL_PREFERENCES:
                counts[method][chosen] += 1
            else:
                counts[method]["wins" if chosen == method else "losses"] += 1
    return counts


# --------------------------------------------------------------------------- pairwise outcomes and the win matrix


@dataclass(frozen=True)
class PairwiseOutcome:
    """One pair read from a judgement: ``first`` scores ``first_score`` (1 a win, 0.5 half a win) against ``second``."""

    first: str
    second: str
    first_score: float


def pairwise_outcomes(judgement: CampaignJudgement) -> tuple[PairwiseOutcome, ...]:
    """The pairs a judgement decides: the preferred slot beats every other slot; tie, all good and all
    bad count as half a win each way for every pair shown. A judgement with k slots gives k - 1 pairs
    when one is preferred (the others are not ordered among themselves), k (k - 1) / 2 otherwise."""
    if isinstance(judgement.preference, int):
        winner = judgement.slots[judgement.preference]
        return tuple(PairwiseOutcome(winner, other, 1.0) for other in judgement.slots if other != winner)
    slots = judgement.slots
    return tuple(PairwiseOutcome(slots[i], slots[j], 0.5) for i in range(len(slots)) for j in range(i + 1, len(slots)))


@dataclass(frozen=True)
class WinMatrix:
    """``wins[i][j]``: the wins of ``methods[i]`` over ``methods[j]``, half wins included."""

    methods: tuple[str, ...]
    wins: tuple[tuple[float, ...], ...]

    @property
    def games(self) -> tuple[tuple[float, ...], ...]:
        """Pairs decided between ``methods[i]`` and ``methods[j]`` (a tie is one game)."""
        n = len(self.methods)
        return tuple(tuple(self.wins[i][j] + self.wins[j][i] for j in range(n)) for i in range(n))

    @property
    def rates(self) -> tuple[tuple[float | None, ...], ...]:
        """Share of the games between the two that ``methods[i]`` won; None where they never met."""
        games = self.games
        n = len(self.methods)
        return tuple(tuple(self.wins[i][j] / games[i][j] if games[i][j] else None for j in range(n)) for i in range(n))

    def rate(self, winner: str, loser: str) -> float | None:
        return self.rates[self.methods.index(winner)][self.methods.index(loser)]


def _comparison_wins(
    judgements: Sequence[CampaignJudgement], methods: tuple[str, ...]
) -> tuple[list[int], NDArray[np.float64]]:
    """Comparison ids, and per comparison the (methods × methods) wins its judgements add up to."""
    index = {method: i for i, method in enumerate(methods)}
    ids = sorted({judgement.comparison_id for judgement in judgements})
    row = {comparison_id: k for k, comparison_id in enumerate(ids)}
    wins = np.zeros((len(ids), len(methods), len(methods)))
    for judgement in judgements:
        for outcome in pairwise_outcomes(judgement):
            first, second = index[outcome.first], index[outcome.second]
            wins[row[judgement.comparison_id], first, second] += outcome.first_score
            wins[row[judgement.comparison_id], second, first] += 1.0 - outcome.first_score
    return ids, wins


def win_matrix(judgements: Iterable[CampaignJudgement], methods: Iterable[str] = ()) -> WinMatrix:
    """The pairwise wins of every method over every other, over all ``judgements``."""
    listed = _checked(judgements)
    order = _method_order(listed, methods)
    _, wins = _comparison_wins(listed, order)
    total = wins.sum(axis=0) if len(wins) else np.zeros((len(order), len(order)))
    return WinMatrix(order, tuple(tuple(float(x) for x in row) for row in total))


# --------------------------------------------------------------------------- Bradley–Terry


def _strongly_connected(wins: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Per matrix of a batch (…, m, m): can every method be reached from every other along "beat at least
    half a game" edges? Zermelo's condition for finite maximum-likelihood strengths."""
    m = wins.shape[-1]
    reach = ((wins > 0) | np.eye(m, dtype=bool)).astype(np.float64)
    span = 1
    while span < m:  # repeated squaring: paths of length up to 2 * span
        reach = np.minimum(reach @ reach, 1.0)
        span *= 2
    return np.asarray((reach > 0).all(axis=(-2, -1)), dtype=np.bool_)


def _log_likelihood(data: NDArray[np.float64], log_g: NDArray[np.float64]) -> NDArray[np.float64]:
    """Bradley–Terry log-likelihood per batch row: sum of W_ij log P(i beats j) = -W_ij log(1 + e^(s_j - s_i))."""
    loss = data * np.logaddexp(0.0, log_g[:, None, :] - log_g[:, :, None])
    result: NDArray[np.float64] = -loss.sum(axis=(-2, -1))
    return result


def _fit_log_strengths(wins: NDArray[np.float64], prior_games: float) -> NDArray[np.float64]:
    """Maximum-likelihood log strengths (mean 0) for a batch of win matrices (b, m, m); rows without a
    finite maximum (possible only without a prior) come back as NaN.

    Newton's method on the log strengths, each step halved until the likelihood rises enough (Armijo),
    so it converges from any start (the log-likelihood is concave, and strictly so once the mean is
    fixed); near the maximum it converges quadratically. Zermelo's fixed-point iteration (the MM
    algorithm) is simpler but needs thousands of iterations when one method beats another nearly always.
    """
    batch, m = wins.shape[0], wins.shape[-1]
    off_diagonal = 1.0 - np.eye(m)
    data = wins + (prior_games / 2.0) * off_diagonal
    finite = _strongly_connected(data) if prior_games == 0 else np.ones(batch, dtype=bool)
    data = np.where(finite[:, None, None], data, off_diagonal)  # a stand-in, so no singular step; discarded below
    games = data + np.swapaxes(data, -1, -2)
    total_wins = data.sum(axis=-1)
    averaging = np.full((m, m), 1.0 / m)  # adds the mean to the singular Hessian: the step keeps the mean at 0
    log_g = np.zeros((batch, m))
    current = _log_likelihood(data, log_g)
    for _ in range(_NEWTON_MAX_ITERATIONS):
        beats = 0.5 * (1.0 + np.tanh((log_g[:, :, None] - log_g[:, None, :]) / 2.0))  # P(i beats j), overflow-free
        gradient = total_wins - (games * beats).sum(axis=-1)
        weights = games * beats * (1.0 - beats)
        curvature = np.eye(m) * weights.sum(axis=-1)[:, :, None] - weights  # minus the Hessian: a graph Laplacian
        step = np.linalg.solve(curvature + averaging, gradient[..., None])[..., 0]
        if float(np.abs(step).max()) < _NEWTON_TOLERANCE:
            break
        rise = (gradient * step).sum(axis=-1)
        size = np.ones(batch)
        pending = np.ones(batch, dtype=bool)
        for _ in range(60):
            candidate = _log_likelihood(data, log_g + size[:, None] * step)
            # a little slack for rounding, so a converged row's tiny step is not refused forever
            enough = candidate >= current + 1e-4 * size * rise - 1e-12 * (1.0 + np.abs(current))
            pending &= ~enough
            if not pending.any():
                break
            size = np.where(pending, size / 2.0, size)
        log_g = log_g + size[:, None] * step
        log_g -= log_g.mean(axis=-1, keepdims=True)  # the likelihood depends on differences only
        current = candidate if not pending.any() else _log_likelihood(data, log_g)
    else:
        raise RuntimeError(f"Bradley–Terry fit did not converge in {_NEWTON_MAX_ITERATIONS} iterations")
    log_g[~finite] = np.nan
    return log_g


def bradley_terry_strengths(
    wins: Sequence[Sequence[float]], prior_games: float = DEFAULT_PRIOR_GAMES
) -> tuple[float, ...]:
    """Log strengths (mean 0) fitted to a win matrix, ``wins[i][j]`` being i's wins over j (half wins allowed).

    With ``prior_games`` 0 this is the plain maximum-likelihood fit, which exists only if every method
    beat (or tied) some method in every group of the others; otherwise ValueError.
    """
    matrix = _win_array(wins)
    _check_prior(prior_games)
    fitted = _fit_log_strengths(matrix[None], prior_games)[0]
    if np.isnan(fitted).any():
        raise ValueError(_NO_FINITE_FIT)
    return tuple(float(x) for x in fitted)


def _win_array(wins: Sequence[Sequence[float]]) -> NDArray[np.float64]:
    matrix = np.asarray(wins, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
        raise ValueError(f"a win matrix is square with at least two methods, not of shape {matrix.shape}")
    if not np.isfinite(matrix).all() or (matrix < 0).any() or np.diag(matrix).any():
        raise ValueError("wins must be finite, non-negative, and zero on the diagonal")
    return matrix


def _check_prior(prior_games: float) -> None:
    if isinstance(prior_games, bool) or not isinstance(prior_games, int | float) or not math.isfinite(prior_games):
        raise ValueError(f"prior_games must be a finite number, not {prior_games!r}")
    if prior_games < 0:
        raise ValueError(f"prior_games must be >= 0, not {prior_games}")


@dataclass(frozen=True)
class BradleyTerryFit:
    """Log strengths (natural log, mean 0) of ``methods`` and their bootstrap percentile intervals.

    ``resamples_used`` may fall short of ``resamples`` only without a prior, when a resample has no
    finite fit; its intervals are then None if none had one.
    """

    methods: tuple[str, ...]
    strengths: tuple[float, ...]
    lower: tuple[float | None, ...]
    upper: tuple[float | None, ...]
    confidence: float
    resamples: int
    resamples_used: int
    seed: int
    prior_games: float


def _check_options(resamples: int, confidence: float, seed: int, prior_games: float) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or not 0 <= resamples <= MAX_RESAMPLES:
        raise ValueError(f"resamples must be an integer from 0 to {MAX_RESAMPLES}, not {resamples!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, not {seed!r}")
    _check_prior(prior_games)


def _bootstrap_log_strengths(
    comparison_wins: NDArray[np.float64], resamples: int, seed: int, prior_games: float
) -> NDArray[np.float64]:
    """(resamples, m) fits, each to the comparisons drawn with replacement (as many as there are)."""
    count, m = comparison_wins.shape[0], comparison_wins.shape[-1]
    flat = comparison_wins.reshape(count, m * m)
    rng = np.random.default_rng(seed)
    fits = []
    per_batch = max(1, min(256, _RESAMPLE_CELLS_PER_BATCH // count))
    for start in range(0, resamples, per_batch):
        size = min(per_batch, resamples - start)
        picks = rng.integers(0, count, size=(size, count)) + count * np.arange(size)[:, None]
        drawn = np.bincount(picks.ravel(), minlength=size * count).reshape(size, count).astype(np.float64)
        fits.append(_fit_log_strengths((drawn @ flat).reshape(size, m, m), prior_games))
    return np.concatenate(fits) if fits else np.zeros((0, m))


def bradley_terry(
    judgements: Iterable[CampaignJudgement],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    prior_games: float = DEFAULT_PRIOR_GAMES,
) -> BradleyTerryFit | None:
    """Bradley–Terry strengths of every method shown, with bootstrap intervals over comparisons; None
    when there is no judgement. ``resamples`` 0 gives no intervals (all None)."""
    _check_options(resamples, confidence, seed, prior_games)
    listed = _checked(judgements)
    if not listed:
        return None
    order = _method_order(listed, ())
    _, per_comparison = _comparison_wins(listed, order)
    point = _fit_log_strengths(per_comparison.sum(axis=0)[None], prior_games)[0]
    if np.isnan(point).any():
        raise ValueError(_NO_FINITE_FIT)
    boot = _bootstrap_log_strengths(per_comparison, resamples, seed, prior_games)
    boot = boot[~np.isnan(boot).any(axis=1)]
    tail = 100.0 * (1.0 - confidence) / 2.0
    if len(boot):
        low, high = np.percentile(boot, [tail, 100.0 - tail], axis=0)
        lower: tuple[float | None, ...] = tuple(float(x) for x in low)
        upper: tuple[float | None, ...] = tuple(float(x) for x in high)
    else:
        lower = upper = (None,) * len(order)
    return BradleyTerryFit(
        methods=order,
        strengths=tuple(float(x) for x in point),
        lower=lower,
        upper=upper,
        confidence=float(confidence),
        resamples=resamples,
        resamples_used=len(boot),
        seed=seed,
        prior_games=float(prior_games),
    )


# --------------------------------------------------------------------------- the leaderboard


@dataclass(frozen=True)
class LeaderboardRow:
    """One method on the leaderboard. The counts are of judgements whose comparison showed the method:
    ``wins`` preferred it, ``losses`` preferred another slot, and ``ties``, ``all_good``, ``all_bad``
    chose that; they add up to ``judgements``. ``comparisons`` counts the distinct comparisons judged.
    ``rank`` orders by strength (1 best, equal strengths share a rank); ``rank_by_interval`` is 1 plus
    the number of methods whose interval lies wholly above this one's, the rank the data can defend.
    Strength, interval and ranks are None until the method has been judged."""

    method: str
    strength: float | None
    lower: float | None
    upper: float | None
    rank: int | None
    rank_by_interval: int | None
    wins: int = 0
    losses: int = 0
    ties: int = 0
    all_good: int = 0
    all_bad: int = 0
    judgements: int = 0
    comparisons: int = 0


@dataclass(frozen=True)
class Leaderboard:
    """Methods best first (methods not yet judged last, by name), the win matrix, and how it was fitted.

    Strengths are natural-log Bradley–Terry strengths anchored to mean 0 over the methods judged."""

    rows: tuple[LeaderboardRow, ...]
    win_matrix: WinMatrix
    judgements: int
    comparisons: int
    confidence: float
    resamples: int
    resamples_used: int
    seed: int
    prior_games: float
    scale: str = "natural log, mean 0"

    @property
    def empty(self) -> bool:
        """Nothing judged yet: no row has a strength."""
        return all(row.strength is None for row in self.rows)


def _competition_ranks(values: Sequence[float]) -> list[int]:
    """1 for the highest value; equal values share the better rank (1, 2, 2, 4). Strengths closer than the
    fit's precision count as equal, so symmetric data give equal ranks, not ranks decided by rounding."""
    return [1 + sum(1 for other in values if other > value + 1e-8) for value in values]


def leaderboard(
    judgements: Iterable[CampaignJudgement],
    methods: Iterable[str] = (),
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    prior_games: float = DEFAULT_PRIOR_GAMES,
) -> Leaderboard:
    """The leaderboard of every method shown, and of ``methods`` (a campaign's, judged or not)."""
    _check_options(resamples, confidence, seed, prior_games)
    listed = _checked(judgements)
    extra = list(methods)
    fit = bradley_terry(listed, resamples=resamples, confidence=confidence, seed=seed, prior_games=prior_games)
    counts = preference_tallies((judgement.slots, judgement.category) for judgement in listed)
    shown_in: dict[str, set[int]] = defaultdict(set)
    for judgement in listed:
        for method in judgement.slots:
            shown_in[method].add(judgement.comparison_id)

    order = _method_order(listed, extra)
    strength: dict[str, tuple[float, float | None, float | None]] = {}
    if fit is not None:  # fitted on the methods shown only: one merely listed has no strength yet
        for i, method in enumerate(fit.methods):
            strength[method] = (fit.strengths[i], fit.lower[i], fit.upper[i])
    ranked = sorted(strength)
    ranks = dict(zip(ranked, _competition_ranks([strength[m][0] for m in ranked])))
    safe_ranks: dict[str, int] = {}
    for method in ranked:
        upper = strength[method][2]
        if upper is None:  # no interval (no resample): no rank the data can defend
            continue
        safe_ranks[method] = 1 + sum(
            1 for other in ranked if (low := strength[other][1]) is not None and other != method and low > upper
        )
    rows = []
    for method in order:
        count = counts[method]
        value, low, high = strength.get(method, (None, None, None))
        rows.append(
            LeaderboardRow(
                method=method,
                strength=value,
                lower=low,
                upper=high,
                rank=ranks.get(method),
                rank_by_interval=safe_ranks.get(method),
                wins=count["wins"],
                losses=count["losses"],
                ties=count["tie"],
                all_good=count["all_good"],
                all_bad=count["all_bad"],
                judgements=count["judgements"],
                comparisons=len(shown_in[method]),
            )
        )
    rows.sort(key=lambda row: (row.rank is None, row.rank or 0, row.method))
    return Leaderboard(
        rows=tuple(rows),
        win_matrix=win_matrix(listed, extra),
        judgements=len(listed),
        comparisons=len({judgement.comparison_id for judgement in listed}),
        confidence=float(confidence),
        resamples=resamples,
        resamples_used=fit.resamples_used if fit is not None else 0,
        seed=seed,
        prior_games=float(prior_games),
    )


# --------------------------------------------------------------------------- position bias


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion (sound near 0 and 1 and with few trials, unlike p ± z·se)."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, not {successes} of {trials}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    share = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (share + z * z / (2.0 * trials)) / denominator
    half = z / denominator * math.sqrt(share * (1.0 - share) / trials + z * z / (4.0 * trials * trials))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class SlotBias:
    """How often slot ``label`` was preferred among the decisive judgements that had that slot.

    ``expected`` is the rate if position did not matter: the mean of 1/k over those judgements, k being
    the number of slots shown (1/2 for pairs, 1/3 for triples). ``lower``/``upper``: Wilson interval."""

    slot: int
    label: str
    wins: int
    judgements: int
    rate: float
    lower: float
    upper: float
    expected: float

    @property
    def biased(self) -> bool:
        """The expected rate lies outside the interval."""
        return not self.lower <= self.expected <= self.upper


@dataclass(frozen=True)
class PositionBias:
    """Win rate per slot over the ``decisive`` judgements (one slot preferred); ``undecided`` judgements
    (tie, all good, all bad) favour no slot and are left out."""

    slots: tuple[SlotBias, ...]
    decisive: int
    undecided: int
    confidence: float


def position_bias(judgements: Iterable[CampaignJudgement], confidence: float = 0.95) -> PositionBias:
    """Win rate by slot position, with Wilson intervals and the rate expected without bias."""
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}")
    listed = _checked(judgements)
    decisive = [judgement for judgement in listed if isinstance(judgement.preference, int)]
    width = max((len(judgement.slots) for judgement in decisive), default=0)
    slots = []
    for slot in range(width):
        having = [judgement for judgement in decisive if len(judgement.slots) > slot]
        wins = sum(1 for judgement in having if judgement.preference == slot)
        low, high = wilson_interval(wins, len(having), confidence)
        slots.append(
            SlotBias(
                slot=slot,
                label=slot_label(slot),
                wins=wins,
                judgements=len(having),
                rate=wins / len(having),
                lower=low,
                upper=high,
                expected=sum(1.0 / len(judgement.slots) for judgement in having) / len(having),
            )
        )
    return PositionBias(tuple(slots), len(decisive), len(listed) - len(decisive), float(confidence))


# --------------------------------------------------------------------------- agreement


def fleiss_agreement(categories: Iterable[tuple[object, str]]) -> Agreement:
    """The agreement (:class:`specsteer.stores.generations.Agreement`) of (comparison, category chosen) pairs, one
    per judgement, over the comparisons judged two or more times: Fleiss' κ for a varying number of raters per
    comparison."""
    by_comparison: dict[object, Counter[str]] = defaultdict(Counter)
    for comparison, category in categories:
        by_comparison[comparison][category] += 1
    items = [counts for counts in by_comparison.values() if sum(counts.values()) >= 2]
    if not items:
        return Agreement(0, 0, None, None, None)
    rated = sum(sum(counts.values()) for counts in items)
    observed = sum(
        sum(n * (n - 1) for n in counts.values()) / (sum(counts.values()) * (sum(counts.values()) - 1))
        for counts in items
    ) / len(items)
    totals: Counter[str] = Counter()
    for counts in items:
        totals.update(counts)
    expected = sum((n / rated) ** 2 for n in totals.values())
    return Agreement(
        comparisons=len(items),
        judgements=rated,
        percent_agreement=observed,
        unanimous=sum(1 for counts in items if len(counts) == 1) / len(items),
        fleiss_kappa=(observed - expected) / (1 - expected) if expected < 1 else None,
    )


def preference_agreement(judgements: Iterable[CampaignJudgement]) -> Agreement:
    """Agreement on what was preferred (:func:`fleiss_agreement`), over the comparisons judged by two or more
    annotators, the categories being the method preferred (whatever slot it sat in) and the special preferences."""
    return fleiss_agreement((judgement.comparison_id, judgement.category) for judgement in _checked(judgements))


def krippendorff_alpha_interval(units: Iterable[Sequence[float]]) -> float | None:
    """Krippendorff's α with the interval metric (squared difference), for units given as the values
    their coders gave (missing ones simply absent). Units with fewer than two values are not pairable
    and do not count. α = 1 - D_o / D_e, where D_o is the mean squared difference between values of the
    same unit (each unit's ordered pairs weighted 1 / (m_u - 1)) and D_e that between any two pairable
    values. None where undefined: fewer than two pairable values, or no variation at all (D_e = 0)."""
    pairable = [np.asarray(unit, dtype=np.float64) for unit in units if len(unit) >= 2]
    if not pairable:
        return None
    values = np.concatenate(pairable)
    if not np.isfinite(values).all():
        raise ValueError("ratings must be finite numbers")
    n = len(values)

    def ordered_pair_squares(x: NDArray[np.float64]) -> float:
        # sum over ordered pairs i != j of (x_i - x_j)^2 = 2 (m sum x^2 - (sum x)^2), centred for precision
        centred = x - x.mean()
        return float(2.0 * len(x) * (centred * centred).sum())

    disagreement_observed = sum(ordered_pair_squares(unit) / (len(unit) - 1) for unit in pairable) / n
    disagreement_expected = ordered_pair_squares(values) / (n * (n - 1))
    if disagreement_expected == 0:
        return None
    return 1.0 - disagreement_observed / disagreement_expected


@dataclass(frozen=True)
class RatingAgreement:
    """Krippendorff's α (interval metric) for one rating criterion. The units are the outputs (a method
    in a comparison, whatever slot each annotator saw it in), the coders the annotators; ``units`` counts
    the outputs rated by two or more annotators, ``values`` the ratings in them. ``alpha`` is None where
    undefined."""

    criterion: str
    alpha: float | None
    units: int
    values: int


def rating_agreement(judgements: Iterable[CampaignJudgement]) -> tuple[RatingAgreement, ...]:
    """Krippendorff's α for each rating criterion given, in criterion-name order."""
    by_unit: dict[str, dict[tuple[int, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for judgement in _checked(judgements):
        for method, scores in zip(judgement.slots, judgement.ratings):
            for criterion, score in scores.items():
                by_unit[criterion][(judgement.comparison_id, method)].append(float(score))
    result = []
    for criterion in sorted(by_unit):
        pairable = [values for values in by_unit[criterion].values() if len(values) >= 2]
        result.append(
            RatingAgreement(
                criterion=criterion,
                alpha=krippendorff_alpha_interval(pairable),
                units=len(pairable),
                values=sum(len(values) for values in pairable),
            )
        )
    return tuple(result)


# --------------------------------------------------------------------------- annotators


@dataclass(frozen=True)
class AnnotatorActivity:
    """How far one annotator got: ``judgements`` saved (``decisive`` of them preferring a slot), and the
    median seconds from display to save over the ``timed`` ones (None if none was timed)."""

    annotator: str
    judgements: int
    decisive: int
    timed: int
    median_seconds: float | None


def annotator_activity(judgements: Iterable[CampaignJudgement]) -> tuple[AnnotatorActivity, ...]:
    """Per annotator, in name order: judgements saved and median seconds per judgement."""
    by_annotator: dict[str, list[CampaignJudgement]] = defaultdict(list)
    for judgement in _checked(judgements):
        by_annotator[judgement.annotator].append(judgement)
    result = []
    for annotator in sorted(by_annotator):
        own = by_annotator[annotator]
        times = [judgement.seconds for judgement in own if judgement.seconds is not None]
        result.append(
            AnnotatorActivity(
                annotator=annotator,
                judgements=len(own),
                decisive=sum(1 for judgement in own if isinstance(judgement.preference, int)),
                timed=len(times),
                median_seconds=float(np.median(times)) if times else None,
            )
        )
    return tuple(result)


# --------------------------------------------------------------------------- everything at once


@dataclass(frozen=True)
class PreferenceReport:
    """What a campaign's (or several campaigns') judgements add up to."""

    judgements: int
    comparisons: int
    annotators: tuple[AnnotatorActivity, ...]
    median_seconds: float | None  # over every timed judgement
    leaderboard: Leaderboard
    position_bias: PositionBias
    agreement: Agreement
    rating_agreement: tuple[RatingAgreement, ...]


def preference_report(
    judgements: Iterable[CampaignJudgement],
    methods: Iterable[str] = (),
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = 0,
    prior_games: float = DEFAULT_PRIOR_GAMES,
) -> PreferenceReport:
    """Leaderboard, position bias, agreement and annotator activity for ``judgements`` (one per annotator
    per comparison); ``methods`` lists methods to show on the leaderboard even before they are judged."""
    listed = _checked(judgements)
    times = [judgement.seconds for judgement in listed if judgement.seconds is not None]
    return PreferenceReport(
        judgements=len(listed),
        comparisons=len({judgement.comparison_id for judgement in listed}),
        annotators=annotator_activity(listed),
        median_seconds=float(np.median(times)) if times else None,
        leaderboard=leaderboard(
            listed, methods, resamples=resamples, confidence=confidence, seed=seed, prior_games=prior_games
        ),
        position_bias=position_bias(listed, confidence),
        agreement=preference_agreement(listed),
        rating_agreement=rating_agreement(listed),
    )


# --------------------------------------------------------------------------- the Compare tab's summary


def latest_judgements(judgements: Iterable[Judgement]) -> list[Judgement]:
    """Each judge's latest judgement per comparison (a re-judgement replaces the earlier one). The judge is
    the page session that saved it (:attr:`Judgement.judge`), not the name typed: one page that types
    eight names is one judge."""
    latest: dict[tuple[int, tuple[str, str]], Judgement] = {}
    for judgement in sorted(judgements, key=lambda j: j.id):
        latest[(judgement.comparison_id, judgement.judge)] = judgement
    return list(latest.values())


def mean_ratings(ratings: Iterable[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Per method (in name order), the mean score of each criterion it was rated on (in name order), over
    judgements' ratings (method -> criterion -> score)."""
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rated in ratings:
        for method, criteria in rated.items():
            for criterion, score in criteria.items():
                scores[method][criterion].append(score)
    return {
        method: {criterion: sum(values) / len(values) for criterion, values in sorted(by_criterion.items())}
        for method, by_criterion in sorted(scores.items())
    }


def summarize_annotations(judgements: Iterable[Judgement]) -> AnnotationSummary:
    """Win rates and mean ratings per method, and agreement between judges (page sessions), over each judge's
    latest judgement of a comparison."""
    latest = latest_judgements(judgements)
    tallies = preference_tallies((judgement.display_order, judgement.preferred_method) for judgement in latest)
    means = mean_ratings(judgement.ratings for judgement in latest)
    return AnnotationSummary(
        judgements=len(latest),
        judges=len({judgement.judge for judgement in latest}),
        names=len({judgement.annotator for judgement in latest}),
        methods={
            method: MethodJudgements(
                shown=count["judgements"],
                wins=count["wins"],
                ties=count["tie"],
                all_good=count["all_good"],
                all_bad=count["all_bad"],
                mean_ratings=means.get(method, {}),
            )
            for method, count in sorted(tallies.items())
        },
        agreement=fleiss_agreement((judgement.comparison_id, judgement.preferred_method) for judgement in latest),
    )
