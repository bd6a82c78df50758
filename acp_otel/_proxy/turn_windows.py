"""The proxy's turns as windows of time, for the joiner: which turn a span or a log record of the agent ran in."""

from __future__ import annotations

from typing import Any

from .proto_spans import attribute

MAX_TURNS = 1024
"""Turn windows remembered (closed ones are forgotten oldest first)."""


class TurnWindow:
    """One turn of the proxy: its span's ids, its session and when it started and ended (wall clock, ns)."""

    __slots__ = ("end_ns", "session_id", "span_id", "start_ns", "trace_id")

    def __init__(self, trace_id: bytes, span_id: bytes, session_id: str, start_ns: int) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.session_id = session_id
        self.start_ns = start_ns
        self.end_ns: int | None = None

    def holds(self, t_ns: int) -> bool:
        return self.start_ns <= t_ns and (self.end_ns is None or t_ns <= self.end_ns)


class TurnWindows:
    """The turns known, oldest first (not thread-safe: the joiner's lock guards it)."""

    def __init__(self, session_keys: tuple[str, ...]) -> None:
        self.turns: list[TurnWindow] = []
        self.traces: set[bytes] = set()  # the turns' trace ids
        self._by_turn: dict[int, TurnWindow] = {}
        self._session_keys = session_keys

    def open(self, key: int, trace_id: int, span_id: int, session_id: str, at_ns: int) -> None:
        """The turn ``key`` (whose span has these ids) began at ``at_ns``."""
        trace_bytes = trace_id.to_bytes(16, "big")
        window = TurnWindow(trace_bytes, span_id.to_bytes(8, "big"), session_id, at_ns)
        self.turns.append(window)
        self.traces.add(trace_bytes)
        self._by_turn[key] = window
        if len(self.turns) > MAX_TURNS:
            closed = next((w for w in self.turns if w.end_ns is not None), self.turns[0])
            self.turns.remove(closed)
            self.traces.discard(closed.trace_id)
            for turn_key, value in list(self._by_turn.items()):
                if value is closed:
                    del self._by_turn[turn_key]

    def close(self, key: int, at_ns: int) -> None:
        """The turn ``key`` ended at ``at_ns``."""
        window = self._by_turn.pop(key, None)
        if window is not None:
            window.end_ns = at_ns

    def is_turn_span(self, key: tuple[bytes, bytes]) -> bool:
        """``key`` is a known turn's span."""
        return key[0] in self.traces and any(w.span_id == key[1] and w.trace_id == key[0] for w in self.turns)

    def first_start(self) -> int | None:
        """When the first turn known began (``None``: no turn yet)."""
        return self.turns[0].start_ns if self.turns else None

    def of_span(self, span: Any) -> TurnWindow | list[TurnWindow] | None:
        """The turn whose window holds the span's start; several: the one its session attribute names, else
        the list of them; none: ``None``."""
        start = span.start_time_unix_nano
        found = [w for w in self.turns if w.holds(start)]
        if len(found) <= 1:
            return found[0] if found else None
        session = attribute(span, self._session_keys)
        if session is not None:
            named = [w for w in found if w.session_id == session]
            return named[-1] if named else None
        return found

    def only_at(self, t_ns: int) -> TurnWindow | None:
        """The one turn whose window holds ``t_ns`` (none, or several: ``None``)."""
        found = [w for w in self.turns if w.holds(t_ns)] if t_ns else []
        return found[0] if len(found) == 1 else None
