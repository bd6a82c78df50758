"""The joining rule (``acp_otel._proxy.span_fates``): an agent's span moved into the turn it ran in, kept with its
moved parent, left alone, or linked to several turns; the counts the proxy reports; the bound of fates kept."""

from __future__ import annotations

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy.span_fates import LEFT, LINKED, MAX_KNOWN, Fates
from acp_otel._proxy.turn_windows import TurnWindows

AGENT_TRACE = b"\x01" * 16
PARENT = b"\x02" * 8


def _span(start_ns: int) -> Span:
    return Span(name="agent work", trace_id=AGENT_TRACE, span_id=b"\x03" * 8, start_time_unix_nano=start_ns)


def _fates(*turns: tuple[int, int, int | None]) -> tuple[Fates, TurnWindows]:
    """Turns as ``(key, start, end)``; the key is also the turn span's ids."""
    windows = TurnWindows(("session.id",))
    for key, start, end in turns:
        windows.open(key, key, key, "s", start)
        if end is not None:
            windows.close(key, end)
    return Fates(windows), windows


def test_spans_in_a_turn_move_into_it_and_background_work_stays_with_its_moved_parent() -> None:
    fates, windows = _fates((7, 100, 200))
    turn = windows.turns[0]
    assert (fates.spans_moved, fates.spans_linked) == (0, 0)
    top = _span(150)
    assert fates.apply(top, None) == turn.trace_id
    assert top.trace_id == turn.trace_id and top.parent_span_id == turn.span_id
    child = _span(160)
    child.parent_span_id = PARENT
    assert fates.apply(child, turn.trace_id) == turn.trace_id
    assert child.trace_id == turn.trace_id and child.parent_span_id == PARENT  # under its parent, not the turn
    late = _span(500)  # after the turn: background work of it
    late.parent_span_id = PARENT
    assert fates.apply(late, turn.trace_id) == turn.trace_id
    assert late.trace_id == turn.trace_id and late.parent_span_id == PARENT
    assert fates.apply(_span(190), None) == turn.trace_id  # another of the turn's own
    assert (fates.spans_moved, fates.spans_linked) == (4, 0)


def test_a_span_in_no_turn_or_under_a_linked_span_is_left_alone() -> None:
    fates, _ = _fates((7, 100, 200))
    alone = _span(500)
    assert fates.apply(alone, None) == LEFT
    under_linked = _span(500)
    assert fates.apply(under_linked, LINKED) == LEFT
    assert alone.trace_id == under_linked.trace_id == AGENT_TRACE and not alone.links
    assert (fates.spans_moved, fates.spans_linked) == (0, 0)


def test_a_span_in_several_turns_is_linked_to_each() -> None:
    fates, windows = _fates((7, 100, None), (8, 110, None))
    span = _span(150)
    assert fates.apply(span, None) == LINKED
    assert [(link.trace_id, link.span_id) for link in span.links] == [(w.trace_id, w.span_id) for w in windows.turns]
    assert span.trace_id == AGENT_TRACE
    assert fates.apply(_span(160), None) == LINKED
    assert (fates.spans_moved, fates.spans_linked) == (0, 2)


def test_the_oldest_fates_are_forgotten_past_the_bound() -> None:
    fates, _ = _fates()
    keys = [(AGENT_TRACE, n.to_bytes(8, "big")) for n in range(MAX_KNOWN + 1)]
    for key in keys[:MAX_KNOWN]:
        fates.remember(key, LEFT)
    assert keys[0] in fates and fates.get(keys[0]) == LEFT
    fates.remember(keys[-1], LINKED)
    assert keys[0] not in fates and fates.get(keys[0]) is None
    assert keys[1] in fates and fates.get(keys[-1]) == LINKED
