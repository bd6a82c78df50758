"""What the joiner's in-process tests feed it: a clock they move by hand, the turn the engine tells its observer,
and the ids of a turn and of another trace."""

from __future__ import annotations

from opentelemetry.trace import NonRecordingSpan, SpanContext

TURN_TRACE, TURN_SPAN = (0xAA).to_bytes(16, "big"), (0xBB).to_bytes(8, "big")
OTHER_TRACE, OTHER_SPAN = (0xCC).to_bytes(16, "big"), (0xDD).to_bytes(8, "big")


class ManualClock:
    """A monotonic clock that reads ``now``, set by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TurnStub:
    """What the engine tells its turn observer: a turn with its span and session."""

    def __init__(self, trace_id: int = 0xAA, span_id: int = 0xBB, session_id: str = "sess-1") -> None:
        self.session_id = session_id
        self.span = NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=False))
