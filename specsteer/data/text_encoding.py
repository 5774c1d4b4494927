"""How the bytes of a file someone saved become text, for every reader of uploaded or user-named text
(histories in ``specsteer.data.history``, records files in ``specsteer.data.datasets``).

Accepted: UTF-8, with or without its byte order mark, and UTF-16 or UTF-32 as Windows editors save them
(Notepad's "Unicode", Excel's "Unicode text"): with a byte order mark, or without one, told by where the
zero bytes fall. A file that does not decode raises :class:`TextEncodingError`, whose message says which
encoding the file looked like and at which byte it broke; each reader wraps it in its own error class.

This module is light (standard library only).
"""

from __future__ import annotations

import codecs

UTF8 = "utf-8-sig"  # reads UTF-8 and drops its byte order mark where there is one


class TextEncodingError(ValueError):
    """Bytes that are not text in the encoding they look like; the message says which, and where."""


# UTF-32's marks begin like UTF-16 LE's, so they are tried first.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)

_SNIFFED_NAMES = {
    "utf-32-le": "UTF-32 LE",
    "utf-32-be": "UTF-32 BE",
    "utf-16-le": "UTF-16 LE",
    "utf-16-be": "UTF-16 BE",
}
SNIFF_BYTES = 4096  # how much of a file's start decides its encoding


def encoding_of(head: bytes) -> str:
    """The codec that reads a file starting with ``head`` (its first :data:`SNIFF_BYTES` or more): the one
    its byte order mark announces ("utf-16" and "utf-32" read and drop the mark), a wide encoding it was
    saved in without a mark, or :data:`UTF8`."""
    return _encoding_of_bom(head) or _sniffed_wide_encoding(head)


def is_utf8(encoding: str) -> bool:
    """Whether ``encoding`` (from :func:`encoding_of`) is UTF-8's, whose lines end in a b"\\n" byte."""
    return encoding == UTF8


def decode_text(data: bytes) -> str:
    """``data`` as text in the encoding :func:`encoding_of` finds (newlines left as they are);
    TextEncodingError, as a phrase, when it does not decode."""
    encoding = encoding_of(data[:SNIFF_BYTES])
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        raise TextEncodingError(_undecodable(data, encoding, error.start)) from None


def _undecodable(data: bytes, encoding: str, byte: int) -> str:
    if encoding in _SNIFFED_NAMES:
        name = _SNIFFED_NAMES[encoding]
        return f"the file looks like {name} without a byte order mark but is not valid {name} (byte {byte}); save it as UTF-8"
    if not is_utf8(encoding):
        return f"the file starts as {encoding.upper()} but is not valid {encoding.upper()} (byte {byte}); save it as UTF-8"
    return not_utf8(data.count(b"\n", 0, byte) + 1, byte)


def not_utf8(line: int, byte: int) -> str:
    """The phrase for UTF-8 that breaks on ``line`` (from 1) at ``byte`` (from 0, in the whole file)."""
    return f"line {line}: not valid UTF-8 (byte {byte}); save the file as UTF-8"


def _encoding_of_bom(data: bytes) -> str | None:
    if data.startswith(codecs.BOM_UTF8):
        return UTF8
    for mark, encoding in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return encoding
    return None


def _sniffed_wide_encoding(data: bytes) -> str:
    """UTF-16 or UTF-32 saved without a byte order mark, told by where the zero bytes fall (text in any
    Latin or most other scripts has a zero byte in each code unit's high half); UTF-8 otherwise.

    UTF-8 text never holds a zero byte, so a file of mostly zero-laden units cannot be UTF-8."""
    head = data[:SNIFF_BYTES]
    if head.count(0) * 4 < len(head):  # fewer than a quarter zeros: not a wide encoding's ASCII-heavy text
        return UTF8
    for width, order in ((4, "le"), (4, "be"), (2, "le"), (2, "be")):
        units = len(head) // width
        if units == 0:
            continue
        zero_high = sum(1 for i in range(units) if _high_bytes_zero(head[i * width : (i + 1) * width], order))
        if zero_high * 10 >= units * 9:  # nine units in ten have a zero high half
            return f"utf-{width * 8}-{order}"
    return UTF8


def _high_bytes_zero(unit: bytes, order: str) -> bool:
    """Whether all but a code unit's low byte are zero (that byte holds a Latin character)."""
    return not any(unit[1:] if order == "le" else unit[:-1])
