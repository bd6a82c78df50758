"""The proxy's turns as windows of time (``acp_otel._proxy.turn_windows``): which turn an agent's span or log record
ran in, with several turns at once, at the windows' edges, and past the bound of turns remembered."""

from __future__ import annotations

from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy.turn_windows import MAX_TURNS, TurnWindow, TurnWindows

SESSION_KEY = "session.id"


def _span(start_ns: int, session: str | None = None) -> Span:
    span = Span(name="agent work", start_time_unix_nano=start_ns)
    if session is not None:
        span.attributes.add(key=SESSION_KEY).value.string_value = session
    return span


def _windows(*turns: tuple[int, str, int, int | None]) -> TurnWindows:
    """Turns as ``(key, session, start, end)`` (end ``None``: still open); the key is also the span's ids."""
    windows = TurnWindows((SESSION_KEY,))
    for key, session, start, end in turns:
        windows.open(key, key, key, session, start)
        if end is not None:
            windows.close(key, end)
    return windows


def test_a_window_holds_both_its_edges_and_nothing_outside() -> None:
    windows = _windows((1, "a", 100, 200))
    (window,) = windows.turns
    assert window.end_ns == 200
    assert [window.holds(t) for t in (99, 100, 150, 200, 201)] == [False, True, True, True, False]
    assert windows.first_start() == 100
    assert TurnWindows((SESSION_KEY,)).first_start() is None


def test_a_turn_s_ids_are_kept_big_endian_and_closing_an_unknown_turn_changes_nothing() -> None:
    windows = _windows((0x0102, "a", 100, None))
    windows.close(99, 150)
    (window,) = windows.turns
    assert window.trace_id == (0x0102).to_bytes(16, "big") and window.span_id == (0x0102).to_bytes(8, "big")
    assert window.end_ns is None and window.session_id == "a"
    assert windows.is_turn_span((window.trace_id, window.span_id))


def test_a_span_in_one_window_joins_it_in_none_joins_nothing() -> None:
    windows = _windows((1, "a", 100, 200), (2, "b", 300, None))
    assert windows.of_span(_span(150)) is windows.turns[0]
    assert windows.of_span(_span(400)) is windows.turns[1]
    assert windows.of_span(_span(250)) is None
    assert windows.of_span(_span(50, session="a")) is None


def test_a_span_in_several_windows_goes_by_its_session_else_is_ambiguous() -> None:
    windows = _windows((1, "a", 100, None), (2, "b", 110, None), (3, "a", 120, None))
    first, second, third = windows.turns
    assert windows.of_span(_span(130, session="b")) is second
    assert windows.of_span(_span(130, session="a")) is third  # the latest of that session's turns
    assert windows.of_span(_span(115, session="a")) is first  # the later one had not begun
    assert windows.of_span(_span(130, session="c")) is None
    assert windows.of_span(_span(130)) == [first, second, third]
    two = _windows((1, "a", 100, None), (2, "b", 110, None))
    assert two.of_span(_span(130)) == two.turns


def test_only_at_names_a_time_s_one_turn() -> None:
    windows = _windows((1, "a", 100, 200), (2, "b", 150, 300))
    first, second = windows.turns
    assert windows.only_at(120) is first
    assert windows.only_at(250) is second
    assert windows.only_at(170) is None  # two turns
    assert windows.only_at(400) is None
    assert windows.only_at(0) is None  # no time given
    assert _windows((1, "a", 0, None)).only_at(0) is None


def test_past_the_bound_a_closed_turn_is_forgotten_first() -> None:
    windows = _windows(*((key, "a", key, None) for key in range(10)))
    windows.close(5, 5)
    for key in range(10, MAX_TURNS + 1):
        windows.open(key, key, key, "a", key)
    assert len(windows.turns) == MAX_TURNS
    keys = [int.from_bytes(w.span_id, "big") for w in windows.turns]
    assert 5 not in keys and keys[0] == 0
    assert (5).to_bytes(16, "big") not in windows.traces and (0).to_bytes(16, "big") in windows.traces
    windows.close(7, 70)  # the others are still known by their keys
    assert windows.turns[6].end_ns == 70


def test_past_the_bound_with_every_turn_open_the_oldest_is_forgotten() -> None:
    windows = _windows(*((key, "a", key, None) for key in range(MAX_TURNS + 1)))
    keys = [int.from_bytes(w.span_id, "big") for w in windows.turns]
    assert keys == list(range(1, MAX_TURNS + 1))
    assert (0).to_bytes(16, "big") not in windows.traces
    assert isinstance(windows.turns[0], TurnWindow)
