"""A campaign's leaderboard beside an evaluation run of the same records, for the Dashboard: ROUGE and human
preference read together. ``build(campaigns, run_ids)`` adds a panel under the run picker ``run_ids`` (a
component whose value is a run id or a list of them) and returns it; the decision of which campaigns match a
run (one made from that run's stored outputs, or one over the same records file and task) is the service's
(``CampaignService.beside_run``).

Hook (one line in ``ui/dashboard_tab.py`` where the run picker is built, once the Dashboard receives the
campaign service): ``campaign_beside_run.build(campaigns, run_picker)``.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from specsteer.service.campaign_values import CampaignError
from specsteer.service.campaigns import CampaignService
from ui import campaign_render
from ui.render import message_box
from ui.wiring import QUIET


def beside_html(campaigns: CampaignService, chosen: Any) -> str:
    """The leaderboards of the campaigns over the same records as the first chosen run."""
    first = chosen[0] if isinstance(chosen, list | tuple) and chosen else chosen
    if first in (None, "", []):
        return ""
    try:
        reports = campaigns.beside_run(int(str(first).lstrip("#")))
    except (CampaignError, ValueError) as error:
        return message_box(str(error), "error")
    if not reports:
        return message_box("No annotation campaign over the same records as this run.", "info")
    return "".join(campaign_render.leaderboard_html(report) for report in reports)


def build(campaigns: CampaignService, run_ids: gr.Dropdown) -> gr.HTML:
    panel = gr.HTML(elem_id="campaign-beside-run")
    run_ids.change(lambda chosen: beside_html(campaigns, chosen), run_ids, panel, **QUIET)
    return panel
