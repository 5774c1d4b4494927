"""Limits on JSON that someone else wrote: how deep it nests, how large it is, how many items it holds.

Python's ``json`` parser recurses once per nesting level, so a file of 10,000 ``[`` ends in a
RecursionError (not a JSONDecodeError) that no caller expects. Every reader of uploaded or
user-named JSON (histories in ``specsteer.data.history``, records files in ``specsteer.data.datasets``) checks the
depth first with :func:`too_deep`, which scans the text without recursing, and refuses with its own
error class naming the line.

This module is light (standard library only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}\n]")


@dataclass(frozen=True)
class JsonLimits:
    """What a JSON document (or JSONL file) may hold; None: no cap on that count."""

    max_depth: int
    max_bytes: int | None = None
    max_items: int | None = None  # the items of a top-level list, or the lines of a JSONL file


# Records files: a LongLaMP record nests 4 levels (the list, the record, its profile, an item);
# CoGenesis a few more. Size and item count are capped where a visitor uploads one (the service).
RECORDS_LIMITS = JsonLimits(max_depth=32)


def too_deep(text: str, max_depth: int) -> int | None:
    """The line on which ``text`` first nests deeper than ``max_depth`` brackets, or None. Strings are
    skipped (brackets inside text do not count); malformed JSON is left to the parser to report."""
    depth, line = 0, 1
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub('""', text)):
        bracket = match.group()
        if bracket == "\n":
            line += 1
        elif bracket in "[{":
            depth += 1
            if depth > max_depth:
                return line
        else:
            depth = max(depth - 1, 0)  # a stray closing bracket is the parser's to report
    return None
