"""A token's popover: its numbers (``specsteer.method.token_details``) as HTML, and the few lines of script
that place it and close it.

The popover is a child of the token's element, hidden until the token is hovered or focused (CSS: the
token is focusable, so Tab reaches it and a tap focuses it). The script only positions it inside the
window (it is ``position: fixed``, so the output box's scrolling cannot clip it) and lets Escape close it.
Every number comes from the side that computed it (the module ``specsteer.method.token_details`` says which);
the popover says so in its last line. Text from a model goes through :func:`ui.markup.esc`.
"""

from __future__ import annotations

import math

from specsteer.method.events import TokenEvent
from specsteer.method.token_details import Alternative, TokenDetails
from ui.markup import esc as _esc

# Where each number lives, one short line per popover (the module docstring of method.token_details has the rest).
WHERE_DRAFT = (
    "Where: p_L and p_S0 on the cloud (shown because the cloud runs inside this app; the protocol never sends "
    "them to the device) · p_S+ on your device."
)
WHERE_CHOSEN = "Where: the candidates and z_L − β·z_S0 came down in the verdict; β·z_S+ was added on your device."
TEST_IN_WORDS = (
    "The cloud keeps a draft when p_L(y) ≥ α·p_S0(y) (greedy decoding; when sampling, with probability "
    "min(1, p_L / (α·p_S0)))."
)

# Placed once per page (app.py loads it): positions an open popover within the window and closes it on Escape.
POPOVER_JS = """
() => {
  if (window.__ssTokenPopovers) return;
  window.__ssTokenPopovers = true;
  const place = (token) => {
    const pop = token.querySelector(':scope > .ss-pop');
    if (!pop) return;
    token.classList.remove('ss-pop-closed');
    const box = token.getBoundingClientRect();
    const width = Math.min(380, window.innerWidth - 16);
    pop.style.width = width + 'px';
    pop.style.left = Math.max(8, Math.min(box.left, window.innerWidth - width - 8)) + 'px';
    const below = window.innerHeight - box.bottom;
    const height = pop.offsetHeight || 260;
    pop.style.top = (below >= height + 8 || below > box.top ? box.bottom + 6 : Math.max(8, box.top - height - 6)) + 'px';
  };
  const tokenOf = (target) => target && target.closest ? target.closest('.ss-tip') : null;
  document.addEventListener('mouseover', (event) => { const t = tokenOf(event.target); if (t) place(t); });
  document.addEventListener('focusin', (event) => { const t = tokenOf(event.target); if (t) place(t); });
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Escape') return;
    document.querySelectorAll('.ss-tip:hover, .ss-tip:focus').forEach((t) => t.classList.add('ss-pop-closed'));
    const active = tokenOf(document.activeElement);
    if (active) active.blur();
  });
}
"""


def _p(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.3g}" if value >= 0.001 else f"{value:.2e}"


def _alternatives_table(columns: list[tuple[str, tuple[Alternative, ...]]]) -> str:
    """Side by side: each model's top alternatives with their probabilities."""
    shown = [(name, alts) for name, alts in columns if alts]
    if not shown:
        return ""
    head = "".join(f"<th>{_esc(name)}</th>" for name, _ in shown)
    rows = []
    for rank in range(max(len(alts) for _, alts in shown)):
        cells = []
        for _, alts in shown:
            if rank < len(alts):
                alt = alts[rank]
                cells.append(f"<td><code>{_esc(repr(alt.text))}</code> {_p(alt.probability)}</td>")
            else:
                cells.append("<td></td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="ss-pop-top"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _verdict(event: TokenEvent, details: TokenDetails) -> str:
    """The ratio test's outcome and margin in words."""
    if event.kind == "rejected" and event.ratio is None:
        return "Not tested: an earlier draft of this round was refused, so this one was dropped unverified."
    margin = details.margin
    if margin is None or details.cloud is None:
        return "The cloud gave no numbers for this draft (a cloud on another machine is never asked for them)."
    times = math.exp(margin) if math.isfinite(margin) else margin
    outcome = "kept" if event.kind == "accepted" else "refused"
    if math.isinf(times):
        return f"p_L is {'infinitely above' if times > 0 else 'zero against'} the bar: {outcome}."
    relation = "clears" if margin >= 0 else "falls short of"
    return (
        f"Here p_L is {times:.3g}× α·p_S0 (log margin {margin:+.2f}): it {relation} the bar, so the cloud {outcome} it."
    )


def _draft_body(event: TokenEvent, details: TokenDetails) -> str:
    cloud = details.cloud
    lines = []
    if cloud is not None and details.alpha is not None:
        lines.append(
            f'<span class="ss-pop-nums"><span data-num="p_L">p_L(y) = {_p(cloud.p_large)}</span> · '
            f'<span data-num="alpha_p_S0">α·p_S0(y) = {details.alpha:g} × {_p(cloud.p_generic)} = '
            f"{_p(details.threshold)}</span> · "
            f'<span data-num="p_S+">p_S+(y) = {_p(details.p_private)}</span></span>'
        )
    else:
        lines.append(f'<span class="ss-pop-nums"><span data-num="p_S+">p_S+(y) = {_p(details.p_private)}</span></span>')
    lines.append(f'<span class="ss-pop-test">{_esc(TEST_IN_WORDS)} {_esc(_verdict(event, details))}</span>')
    columns = [("your specialist p_S+", details.top_private)]
    if cloud is not None:
        columns = [("generalist p_L", cloud.top_large), ("generic copy p_S0", cloud.top_generic), *columns]
    lines.append(_alternatives_table(columns))
    return "".join(lines)


def _chosen_body(details: TokenDetails) -> str:
    return (
        f'<span class="ss-pop-test">Drawn from {_esc(details.drawn_from)}: '
        f'<span data-num="p_drawn">p = {_p(details.p_drawn)}</span> for this token.</span>'
        + _alternatives_table([("that distribution", details.top_drawn)])
    )


def popover_html(event: TokenEvent, label: str) -> str:
    """The popover of a token whose event carries details (``label``: its kind in words)."""
    details = event.details
    if details is None:
        return ""
    place = f"round {event.round}" + (f", position {event.position}" if event.position is not None else "")
    chosen = bool(details.drawn_from)
    body = _chosen_body(details) if chosen else _draft_body(event, details)
    where = WHERE_CHOSEN if chosen else WHERE_DRAFT
    return (
        f'<span class="ss-pop" role="tooltip"><b>{_esc(label)}</b> · <code>{_esc(repr(event.text))}</code> · '
        f'{_esc(place)}{body}<span class="ss-pop-where">{_esc(where)}</span></span>'
    )
