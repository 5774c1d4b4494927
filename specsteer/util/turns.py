"""Whose turn it is to run a model: one at a time, an interactive generation before the next grid cell.

The app runs one model computation at a time (two would share the CPU and the memory of the models).
An evaluation grid is hundreds of generations; had it held the models from its first cell to its
last, another visitor's single generation would wait for all of them. So a grid takes a turn per
cell and gives the models back between cells, and a waiting interactive generation (Generate,
Compare) goes before the grid's next cell: it waits for at most the cell in flight.

Interactive generations take turns among themselves in arrival order as the lock hands them out;
the app's queue (one slot for them) already orders them. A grid waits while any interactive
generation holds or awaits a turn, so a steady stream of visitors slows a grid down; it never stops
them.

Turns are not tied to a thread: a generation is a generator that may be resumed on another thread
than the one that took the turn, and the turn is given back wherever it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ModelTurns:
    """The models' turns: :meth:`interactive` before :meth:`batch`."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._busy = False
        self._interactive_waiting = 0
        self.batch_turns = 0  # grid cells given a turn so far (for tests and logs)

    @contextmanager
    def interactive(self) -> Iterator[None]:
        """Hold the models for one interactive generation; waits for at most the grid cell in flight."""
        with self._condition:
            self._interactive_waiting += 1
            try:
                while self._busy:
                    self._condition.wait()
            finally:
                self._interactive_waiting -= 1
            self._busy = True
        try:
            yield
        finally:
            self._release()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the models for one grid cell, once no interactive generation holds or awaits them."""
        with self._condition:
            while self._busy or self._interactive_waiting:
                self._condition.wait()
            self._busy = True
            self.batch_turns += 1
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        with self._condition:
            self._busy = False
            self._condition.notify_all()
