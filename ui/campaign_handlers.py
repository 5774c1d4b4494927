"""The Campaigns panel's handlers over the campaign service: each takes the form (``CampaignForm``, by its
widgets' names) or a few widget values and returns the panel's new values (testable without a server); the
layout and wiring are in ui/campaign_tab.py, the decisions in ``specsteer.service.campaign_form`` and the
campaign service."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gradio as gr

from specsteer.service.app_service import AppService
from specsteer.service.campaign_form import CampaignForm, shows_run, shows_upload
from specsteer.service.campaign_import import create_from_run, find_run, proposed
from specsteer.service.campaign_values import CampaignError, CreatedCampaign
from specsteer.service.campaigns import CampaignService
from specsteer.service.evaluation_runs import run_label
from specsteer.service.events import ExportRefused, Failed
from ui import campaign_render
from ui.markup import esc
from ui.render import message_box

ALL = "All campaigns"


class CampaignHandlers:
    """The panel's handlers over the campaigns and the app's service (which keeps an uploaded records file)."""

    def __init__(self, service: CampaignService, app: AppService) -> None:
        self.service = service
        self.app = app

    def names(self) -> list[str]:
        return [campaign.name for campaign in self.service.campaigns()]

    def refresh_choices(self, current: str | None = None) -> Any:
        names = self.names()
        value = current if current in names or current == ALL else (names[0] if names else ALL)
        return gr.update(choices=[*names, ALL], value=value)

    def run_choices(self) -> Any:
        """The stored runs a campaign can be made from (by name; the run picker's label says which)."""
        return gr.update(choices=[(run_label(run), run.name) for run in self.app.stored_runs()])

    def source_shown(self, data: str) -> tuple[Any, Any]:
        """The upload box and the run picker, each shown for its own source only."""
        return gr.update(visible=shows_upload(data)), gr.update(visible=shows_run(data))

    def run_chosen(self, run: str | None) -> tuple[Any, Any, Any]:
        """The methods, α and β a campaign from ``run`` proposes (the run's private methods, its first setting)."""
        skip = gr.skip()
        try:
            chosen = proposed(find_run(self.service, run or ""))
        except CampaignError:
            return skip, skip, skip
        return (
            gr.update(value=list(chosen.methods)) if chosen.methods else skip,
            gr.update(value=chosen.alpha) if chosen.alpha is not None else skip,
            gr.update(value=chosen.beta) if chosen.beta is not None else skip,
        )

    def estimate(self, **values: Any) -> str:
        """The form's estimated time (``CampaignService.estimate``), or what keeps it from one."""
        try:
            form = CampaignForm(**values)
            if form.from_run:
                return message_box("From a stored run: nothing is generated, the campaign is ready at once.", "info")
            text = self.service.estimate(form.request()).text()
        except (CampaignError, ValueError) as error:
            return message_box(f"No estimate: {error}", "info")
        return message_box(text, "info")

    def create(self, **values: Any) -> tuple[str, Any, str]:
        """Store a campaign; its name for :meth:`generate_created` ("" when refused, or when it was made from a
        stored run and is ready at once: nothing is generated). In public, the operator's token is checked first:
        a refused call reads no upload (up to 16 MiB)."""
        try:
            form = CampaignForm(**values)
            self.service.check_operator(form.token or "", "Creating a campaign")
            if form.from_run:
                created = create_from_run(self.service, form.run_request(), form.token or "")
            else:
                kept = None
                if shows_upload(form.data):
                    if not form.upload:
                        raise CampaignError(
                            "Upload a records file, or choose the bundled sample or the shared records."
                        )
                    kept = str(self.app.keep_records(form.upload, form.task))
                created = self.service.create(form.request(kept), form.token or "")
        except (CampaignError, ExportRefused, ValueError) as error:
            return message_box(str(error), "error"), gr.skip(), ""
        return (
            _created_html(created, form.from_run),
            self.refresh_choices(created.campaign.name),
            ("" if form.from_run else created.campaign.name),
        )

    def show(self, name: str | None) -> tuple[str, str]:
        """The campaign's status line and its results (or every campaign's results)."""
        try:
            status = "" if not name or name == ALL else campaign_render.status_html(self.service.status(name))
            report = self.service.report(None if not name or name == ALL else name)
        except (CampaignError, ValueError) as error:
            return message_box(str(error), "error"), ""
        return status, campaign_render.results_html(report)

    def generate(self, name: str | None, token: str) -> Iterator[str]:
        """Generate (or resume) the campaign's comparisons, its status line after each one. A queued event in
        the models' slot: it never runs beside a visitor's generation; Stop or a closed page ends it."""
        try:
            self.service.check_operator(token or "")
            campaign = self.service.campaign(name or "")
        except (CampaignError, ExportRefused) as error:
            yield message_box(str(error), "error")
            return
        for event in self.service.generate(campaign.name):
            if isinstance(event, Failed):
                yield message_box(event.message, "error")
                return
            yield campaign_render.status_html(self.service.status(campaign.name))

    def generate_created(self, name: str, token: str) -> Iterator[str]:
        """After Create: generate the campaign just stored, nothing when it was refused."""
        if name:
            yield from self.generate(name, token)

    def stopped(self, name: str | None) -> str:
        note = message_box("Stopped: the comparisons done stay stored; Generate resumes the campaign.", "info")
        try:
            return campaign_render.status_html(self.service.status(name or "")) + note
        except CampaignError:
            return note

    def export(self, name: str | None, kind: str, token: str) -> tuple[Any, str]:
        hidden = gr.update(value=None, visible=False)
        try:
            exported = self.service.export(
                "csv" if kind == "csv" else "jsonl", None if name in (None, "", ALL) else name, token or ""
            )
        except (CampaignError, ExportRefused, ValueError) as error:
            return hidden, message_box(str(error), "error")
        if exported.path is None:
            return hidden, message_box("No judgement yet: nothing to export.", "info")
        return gr.update(value=str(exported.path), visible=True), message_box(
            f"{exported.count} judgement(s) exported.", "ok"
        )


def _created_html(created: CreatedCampaign, from_run: bool) -> str:
    codes = "".join(f"<li>{esc(who)}: <code>{esc(code)}</code></li>" for who, code in created.codes.items())
    shown = f"<p>Join codes (shown once; hand each to its annotator):</p><ul>{codes}</ul>" if codes else ""
    campaign = created.campaign
    if from_run:
        text = (
            f"Campaign “{campaign.name}” stored from the run's outputs: {campaign.ready} comparison(s), ready to judge."
        )
    else:
        text = (
            f"Campaign “{campaign.name}” stored: its {campaign.planned} comparison(s) are generated next, one by "
            "one (Stop ends it; Generate resumes it)."
        )
    return message_box(text, "ok") + shown
