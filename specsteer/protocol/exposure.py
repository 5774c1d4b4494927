"""Who the app serves: a local single user, or the public (a Hugging Face Space, any server beyond loopback).

On a public deployment every visitor is anonymous and can call every endpoint directly, so what a
form offers is no limit: the operator decides, through the environment, what visitors may reach.

How the app tells the two apart (first rule that applies):

1. ``SPECSTEER_PUBLIC=1`` (or true/yes/on): public; ``SPECSTEER_PUBLIC=0`` (false/no/off): local,
   the operator's explicit word (a private Space, a container only its owner reaches).
2. ``SPACE_ID`` set (Hugging Face sets it in every Space): public.
3. ``GRADIO_SERVER_NAME`` naming an address beyond loopback (the Docker image's 0.0.0.0): public.
4. Otherwise local: the app listens on loopback for the person at this machine.

What changes in public:

* **The Cloud**: a visitor may choose among the operator's addresses (``SPECSTEER_CLOUD_URLS``,
  comma or space separated, plus ``SPECSTEER_CLOUD_URL``) or the in-process Cloud, nothing else; the
  server never connects anywhere else, so the app's shared secret only ever goes to those addresses
  and no setting probes other hosts or ports. Locally the field is free: the user is the operator.
* **Annotation exports** (every annotator's names and comments) need the operator's token,
  ``SPECSTEER_ADMIN_TOKEN``; without one configured nobody exports in public.

This module is light (standard library only).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from specsteer.engine.settings import IN_PROCESS, cloud_address

log = logging.getLogger(__name__)

PUBLIC_ENV = "SPECSTEER_PUBLIC"
SPACE_ENV = "SPACE_ID"
SERVER_NAME_ENV = "GRADIO_SERVER_NAME"
CLOUD_URL_ENV = "SPECSTEER_CLOUD_URL"
CLOUD_URLS_ENV = "SPECSTEER_CLOUD_URLS"
ADMIN_TOKEN_ENV = "SPECSTEER_ADMIN_TOKEN"

_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def secret_problem(secret: str | None, source: str) -> str | None:
    """Why ``secret`` cannot be a shared secret (it travels in an HTTP header: printable ASCII only), or None.
    ``source`` names where it came from, e.g. "$SPECSTEER_CLOUD_SECRET"; the secret itself is never repeated."""
    if secret is None or (secret.isascii() and secret.isprintable()):
        return None
    return (
        f"{source} holds a character that is not printable ASCII; a shared secret travels in an HTTP header, "
        "so use letters, digits and punctuation only (e.g. the output of `python -c \"import secrets; "
        "print(secrets.token_urlsafe(32))\"`)."
    )


@dataclass(frozen=True)
class Exposure:
    """Whether the app serves the public, why, and what its operator allows there."""

    public: bool = False
    why: str = "a local run on loopback"
    cloud_urls: tuple[str, ...] = ()  # the operator's Cloud addresses, as settings.cloud_address writes them
    admin_token: str | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Exposure:
        environ = os.environ if environ is None else environ
        public, why = _mode(environ)
        return cls(public, why, _cloud_urls(environ), environ.get(ADMIN_TOKEN_ENV) or None)

    def cloud_problem(self, address: str) -> str | None:
        """Why a visitor may not use the Cloud at ``address`` (as cloud_address writes it), or None."""
        if not self.public or address == IN_PROCESS or address in self.cloud_urls:
            return None
        offered = ", ".join(self.cloud_urls) if self.cloud_urls else "none"
        return (
            f"This public app runs the Cloud in process or at an address its operator configured "
            f"(${CLOUD_URLS_ENV}: {offered}); it does not connect to other addresses."
        )

    def may_export_all(self, token: str | None) -> bool:
        """Whether ``token`` lets its holder export every annotation: always locally, in public only with
        the operator's token (compared in constant time)."""
        if not self.public:
            return True
        if not self.admin_token or not token:
            return False
        return hmac.compare_digest(token.encode(), self.admin_token.encode())


def _mode(environ: Mapping[str, str]) -> tuple[bool, str]:
    explicit = environ.get(PUBLIC_ENV, "").strip().lower()
    if explicit in _YES:
        return True, f"${PUBLIC_ENV} is {explicit}"
    if explicit in _NO:
        return False, f"${PUBLIC_ENV} is {explicit}"
    if environ.get(SPACE_ENV):
        return True, f"a Hugging Face Space (${SPACE_ENV} is set)"
    host = environ.get(SERVER_NAME_ENV, "127.0.0.1").strip() or "127.0.0.1"
    if not is_loopback(host):
        return True, f"listening on {host}, beyond loopback"
    return False, "a local run on loopback"


def _cloud_urls(environ: Mapping[str, str]) -> tuple[str, ...]:
    given = re.split(r"[,\s]+", environ.get(CLOUD_URLS_ENV, "")) + [environ.get(CLOUD_URL_ENV, "")]
    urls: list[str] = []
    for text in given:
        try:
            address = cloud_address(text)
        except ValueError as error:
            log.warning("a configured Cloud address is not used: %s", error)
            continue
        if address and address not in urls:
            urls.append(address)
    return tuple(urls)
