"""The token stream on a terminal: settled tokens in their kind's colour, drafts shown dim the moment
the Edge drafts them and redrawn in the verdict's colour when it comes back.

A pending draft is written after the settled text with the cursor's place saved first (``ESC 7``);
when the round's settled tokens arrive the cursor goes back there (``ESC 8``), the pending text is
cleared to the end of the screen (``ESC [J``) and the settled tokens are written in its place. Pending
text is kept on one line (a newline shows as ``↵``) so that the saved place stays valid; a draft long
enough to wrap at the bottom of the window can still scroll it, which leaves the dim text on screen.
Without colour (a pipe, ``NO_COLOR``) only settled tokens are written.
"""

from __future__ import annotations

from typing import TextIO

from specsteer.method.events import TokenEvent

# ANSI styles per token kind; rejected drafts are struck through, pending ones dim and italic.
STYLES = {
    "accepted": "\033[32m",
    "rejected": "\033[9;31m",
    "recovered": "\033[33m",
    "bonus": "\033[36m",
    "plain": "",
    "pending": "\033[2;3m",
}
RESET = "\033[0m"
_SAVE, _RESTORE, _CLEAR_BELOW = "\0337", "\0338", "\033[J"


class TerminalStream:
    """Writes token events to ``out`` as they come (see the module's note)."""

    def __init__(self, out: TextIO, colour: bool) -> None:
        self.out = out
        self.colour = colour
        self._pending = False  # pending text is on screen after the saved cursor place

    def add(self, event: TokenEvent) -> None:
        if event.pending:
            if self.colour:
                self._show_pending(event.text)
            return
        self._clear_pending()
        text = event.text if event.kind != "rejected" or self.colour else ""
        if text:
            style = STYLES[event.kind] if self.colour else ""
            self.out.write(f"{style}{text}{RESET}" if style else text)
            self.out.flush()

    def end(self) -> None:
        """Drafts still pending at the end were never sent: take them off the screen."""
        self._clear_pending()

    def _show_pending(self, text: str) -> None:
        if not text:
            return
        if not self._pending:
            self.out.write(_SAVE)
            self._pending = True
        self.out.write(f"{STYLES['pending']}{text.replace(chr(10), '↵')}{RESET}")
        self.out.flush()

    def _clear_pending(self) -> None:
        if self._pending:
            self.out.write(_RESTORE + _CLEAR_BELOW)
            self._pending = False
