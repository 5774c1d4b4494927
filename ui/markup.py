"""Escaping for HTML: the one function every piece of untrusted text goes through (the rule of every ui module that builds HTML)."""

from __future__ import annotations

import html

# C0 control characters (other than newline and tab) and DEL are invisible or break the layout;
# show them as their Unicode "control picture" so random or odd output stays readable.
_CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(32) if chr(code) not in "\n\t"}
_CONTROL_PICTURES[0x7F] = "\u2421"


def esc(text: object) -> str:
    """Escaped text for HTML content and attribute values (quotes included)."""
    return html.escape(str(text), quote=True).translate(_CONTROL_PICTURES)
