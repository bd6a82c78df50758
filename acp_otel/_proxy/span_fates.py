"""What became of each span of the agent's (its fate), and the joining rule that decides it (docs/proxy.md).

A fate is the trace id a span ended in: a turn's (moved), :data:`LEFT` (left alone) or :data:`LINKED` (left
alone, linked to several turns: its subtree is not joined either).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from .proto_spans import Key
from .turn_windows import TurnWindow, TurnWindows

LEFT = b""  # a span left alone
LINKED = b"L"  # a span left alone and linked to several turns: its subtree is not joined either
MAX_KNOWN = 50_000
"""Spans whose fate is remembered (for their children and logs: some 12 MB at most); the oldest are forgotten
first."""


class Fates:
    """The fates remembered, and the rule (not thread-safe: the joiner's lock guards it)."""

    def __init__(self, windows: TurnWindows) -> None:
        self._windows = windows
        self._fate: OrderedDict[Key, bytes] = OrderedDict()
        self.spans_moved = 0
        self.spans_linked = 0

    def get(self, key: Key) -> bytes | None:
        """``key``'s fate, if it was decided (and not forgotten)."""
        return self._fate.get(key)

    def __contains__(self, key: Key) -> bool:
        return key in self._fate

    def remember(self, key: Key, fate: bytes) -> None:
        self._fate[key] = fate
        if len(self._fate) > MAX_KNOWN:
            self._fate.popitem(last=False)

    def apply(self, span: Any, parent: bytes | None) -> bytes:
        """Move, re-parent or link ``span`` given its parent's fate (``None``: it has no parent, or its parent
        never came); returns its own fate."""
        window = self._windows.of_span(span)
        if isinstance(window, TurnWindow):  # it ran in this turn: it joins it, under its parent if that did too
            if parent == window.trace_id:
                span.trace_id = parent
                self.spans_moved += 1
                return parent
            return self._move(span, window)
        if parent == LINKED:
            return LEFT
        if parent:  # moved: background work of a turn stays with it
            span.trace_id = parent
            self.spans_moved += 1
            return parent
        if window is None:
            return LEFT
        return self._link(span, window)

    def _move(self, span: Any, window: TurnWindow) -> bytes:
        span.trace_id = window.trace_id
        span.parent_span_id = window.span_id
        self.spans_moved += 1
        return window.trace_id

    def _link(self, span: Any, windows: list[TurnWindow]) -> bytes:
        for window in windows:
            span.links.add(trace_id=window.trace_id, span_id=window.span_id)
        self.spans_linked += 1
        return LINKED
