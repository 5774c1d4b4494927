"""What a page of the app starts from, GUI-free: the settings its widgets start at, the bundled sample users (one
catalogue, ``specsteer.data.sources.SAMPLE_USERS``) read as named histories, and the Cloud setting's starting
value from the environment. The Generate tab starts from these, and the start-up warm-up reads the same request."""

from __future__ import annotations

import os

from specsteer.data.history_upload import parse_history
from specsteer.data.sources import SAMPLE_USERS, sample_history_path
from specsteer.engine.settings import GenerationSettings, sentence
from specsteer.protocol.exposure import CLOUD_URL_ENV, cloud_address
from specsteer.stores.generations import NamedHistory

# A page's widgets start at the settings' defaults, except the prompt style: the app starts with the clean one,
# which does not invite the small Specialist to copy the history's layout (README, output hygiene).
PAGE_DEFAULTS = GenerationSettings(pairing="", prompt_style="clean")


def read_sample(sample: str) -> NamedHistory:
    path = sample_history_path(sample)
    return NamedHistory(parse_history(path.read_bytes(), filename=path.name), f"sample “{SAMPLE_USERS[sample].label}”")


def environment_cloud() -> tuple[str, str | None]:
    """The Cloud setting's starting value from $SPECSTEER_CLOUD_URL, and why it was not usable (then the
    setting starts empty, in process: an address with a credential in it is never put on the page)."""
    try:
        return cloud_address(os.environ.get(CLOUD_URL_ENV, "")), None
    except ValueError as error:
        return "", sentence(f"${CLOUD_URL_ENV} is not used: {error} The Cloud runs inside this app")
