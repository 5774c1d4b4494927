"""HTML of the campaign panel and the judging queue: the leaderboard, win matrix, position bias, agreement,
annotators, a campaign's status and one comparison as an annotator sees it. Pure functions of the service's
typed values; every text escaped."""

from __future__ import annotations

from collections.abc import Sequence

from specsteer.method.catalog import method_label
from specsteer.service.campaign_checks import NEAR_IDENTICAL
from specsteer.service.campaign_values import CampaignReport, CampaignStatusView, JudgeView
from specsteer.stores.generations import slot_label
from ui.markup import esc
from ui.render import comparison_slot_html

SHORTCUTS = (
    ("T", "tie"),
    ("G", "all good"),
    ("X", "all bad"),
    ("Enter", "save and next"),
    ("→", "skip"),
    ("←", "back"),
)


def _number(value: float | None, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], css: str) -> str:
    head = "".join(f"<th>{esc(header)}</th>" for header in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="ss-table {css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def slot_keys(count: int) -> tuple[str, str]:
    """The digit keys of ``count`` outputs and what they do: ("1 … 2", "prefer output A … B")."""
    if count <= 1:
        return "1", "prefer output A"
    return f"1 … {count}", f"prefer output A … {slot_label(count - 1)}"


def shortcuts_html(count: int) -> str:
    """The keyboard hint for a comparison of ``count`` outputs."""
    keys = " · ".join(f"<kbd>{esc(key)}</kbd> {esc(what)}" for key, what in (slot_keys(count), *SHORTCUTS))
    return f'<div class="ss-shortcuts" id="judge-shortcuts">Keyboard: {keys}</div>'


def status_html(view: CampaignStatusView) -> str:
    campaign = view.campaign
    state = campaign.status
    who = "open to anyone (names are not checked)" if campaign.open_to_anyone else "annotators with a join code"
    error = f'<div class="ss-box ss-box-error">{esc(campaign.error)}</div>' if campaign.error else ""
    return (
        f'<div class="ss-campaign-status" id="campaign-status-line"><b>{esc(campaign.name)}</b>: '
        f"{campaign.ready} of {campaign.planned} comparisons ready ({esc(state)}){_alike(view.near_identical)} · "
        f"{esc(campaign.task)} · "
        f"{esc(', '.join(method_label(m) for m in campaign.methods))} · {esc(who)} · "
        f"{view.annotators} annotator(s), {view.judgements} judgement(s)</div>{error}{_sources_html((view.source,))}"
    )


def _alike(count: int) -> str:
    """How many comparisons were left out for near-identical outputs, and the rule (campaign_checks)."""
    if not count:
        return ""
    rule = (
        f"outputs whose normalised texts are equal or at least {NEAR_IDENTICAL:.0%} alike character by character: "
        "nothing to choose between, so no annotator is asked"
    )
    return f' · <span title="{esc(rule)}">{count} with near-identical outputs, not shown to annotators</span>'


def _sources_html(sources: Sequence[str | None]) -> str:
    """Where a campaign's outputs came from, for one made from a stored evaluation run."""
    lines = "".join(f"<p>{esc(source)}</p>" for source in sources if source)
    return f'<div class="ss-muted ss-campaign-source">{lines}</div>' if lines else ""


def leaderboard_html(result: CampaignReport) -> str:
    report = result.report
    board = report.leaderboard
    counts = lambda row: f"{row.wins} / {row.losses} / {row.ties} / {row.all_good} / {row.all_bad}"  # noqa: E731
    if board.empty:
        rows = [[esc(method_label(row.method)), "–", "–", "–", "0"] for row in board.rows]
        note = '<p class="ss-muted">No judgement yet: strengths appear once annotators judge.</p>'
    elif board.too_few:
        rows = [[esc(method_label(row.method)), "–", "–", "–", counts(row)] for row in board.rows]
        note = (
            f'<div class="ss-box ss-box-warning" id="campaign-too-few">{esc(board.too_few_text().capitalize())}. '
            f"A ranking and its intervals need {board.minimum_comparisons} judged comparisons: below that, the "
            "bootstrap has too few comparisons to resample, and its intervals would look surer than they are.</div>"
        )
    else:
        rows = [
            [
                esc(method_label(row.method)),
                esc(row.rank if row.rank is not None else "–"),
                _number(row.strength, 3, signed=True),
                f"[{_number(row.lower, 2, True)}, {_number(row.upper, 2, True)}]",
                counts(row),
            ]
            for row in board.rows
        ]
        note = (
            f'<p class="ss-muted">Bradley–Terry strengths ({esc(board.scale)}), {int(board.confidence * 100)} % '
            f"bootstrap intervals over {board.comparisons} comparison(s), {board.resamples_used} resamples.</p>"
        )
    headers = ["method", "rank", "strength", "interval", "wins / losses / ties / all good / all bad"]
    if board.empty:
        headers = ["method", "rank", "strength", "interval", "judgements"]
    scope = "every campaign" if len(result.campaigns) != 1 else result.campaigns[0]
    opened = " Open to anyone: annotators are names typed in, not checked." if result.open_to_anyone else ""
    alike = (
        f" {result.near_identical} more had near-identical outputs and were not shown." if result.near_identical else ""
    )
    title = (
        f"<h4>Leaderboard · {esc(scope)}</h4><p id=\"campaign-judged\">{report.comparisons} of {result.to_judge} "
        f"comparisons judged ({report.judgements} judgement(s)).{alike}{esc(opened)}</p>"
    )
    sources = _sources_html(result.sources)
    return f'<div id="campaign-leaderboard">{title}{sources}{_table(headers, rows, "ss-leaderboard")}{note}</div>'


def win_matrix_html(result: CampaignReport) -> str:
    matrix = result.report.leaderboard.win_matrix
    headers = ["wins of ↓ over →", *(method_label(m) for m in matrix.methods)]
    rows = [
        [esc(method_label(method)), *("–" if i == j else _number(value, 1) for j, value in enumerate(matrix.wins[i]))]
        for i, method in enumerate(matrix.methods)
    ]
    return f'<div id="campaign-win-matrix"><h4>Win matrix</h4>{_table(headers, rows, "ss-win-matrix")}</div>'


def position_bias_html(result: CampaignReport) -> str:
    bias = result.report.position_bias
    rows = [
        [
            esc(slot.label),
            f"{slot.wins} of {slot.judgements}",
            _number(slot.rate),
            f"[{_number(slot.lower)}, {_number(slot.upper)}]",
            _number(slot.expected),
            "yes" if slot.biased else "no",
        ]
        for slot in bias.slots
    ]
    table = _table(["slot", "preferred", "rate", "95 % interval", "expected", "outside"], rows, "ss-bias")
    return (
        f'<div id="campaign-position-bias"><h4>Position bias</h4>{table}<p class="ss-muted">{bias.decisive} '
        f"decisive judgement(s), {bias.undecided} tie / all good / all bad.</p></div>"
    )


def agreement_html(result: CampaignReport) -> str:
    agreement = result.report.agreement
    kappa = _number(agreement.fleiss_kappa, 3)
    lines = [
        f"Fleiss' κ on the preference: {kappa} over {agreement.comparisons} comparison(s) judged by two or more "
        f"({agreement.judgements} judgements; agreement {_number(agreement.percent_agreement)})."
    ]
    for rating in result.report.rating_agreement:
        lines.append(
            f"Krippendorff's α ({esc(rating.criterion)}): {_number(rating.alpha, 3)} over {rating.units} output(s) "
            f"rated twice or more."
        )
    items = "".join(f"<li>{line}</li>" for line in lines)
    return f'<div id="campaign-agreement"><h4>Agreement</h4><ul>{items}</ul></div>'


def annotators_html(result: CampaignReport) -> str:
    rows = [
        [esc(a.annotator), str(a.judgements), str(a.decisive), _number(a.median_seconds, 1)]
        for a in result.report.annotators
    ]
    table = _table(["annotator", "judgements", "decisive", "median seconds"], rows, "ss-annotators")
    overall = _number(result.report.median_seconds, 1)
    return (
        f'<div id="campaign-annotators"><h4>Annotators</h4>{table}<p>Median time per judgement: {overall} s.</p></div>'
    )


def results_html(result: CampaignReport) -> str:
    return "".join(
        part(result)
        for part in (leaderboard_html, win_matrix_html, position_bias_html, agreement_html, annotators_html)
    )


def complete_html(view: JudgeView) -> str:
    """The screen after the last comparison: the queue is done, and how to look back."""
    return (
        f'<div class="ss-box ss-box-ok ss-queue-complete" id="judge-complete"><div><h3>Queue complete</h3>'
        f"<p>You have judged all {view.total} comparisons of “{esc(view.campaign)}”. Thank you: every judgement "
        "is saved. Review them with the button below; a second save of a comparison replaces the first.</p>"
        "</div></div>"
    )


def progress_text(view: JudgeView) -> str:
    return f'<div class="ss-judge-progress" id="judge-progress-line">{view.position + 1} of {view.total} · judged {view.judged}</div>'


def input_html(view: JudgeView) -> str:
    return f'<div class="ss-judge-input"><b>Input</b> ({esc(view.task)}, comparison #{view.comparison_id}):<div class="ss-output">{esc(view.input_text)}</div></div>'


def slot_html(view: JudgeView, slot: int) -> str:
    return comparison_slot_html(view.labels[slot], view.slots[slot].text)
