"""The joiner as the proxy drives it (``acp_otel._proxy.joiner``): turns told by the engine open and close their
windows, the agent's spans and logs joined to them in any order (children before their parents, parents decided in
an earlier request, spans already in a turn's trace), what is held and released, and the proxy's tool spans."""

from __future__ import annotations

import time

from joiner_stubs import OTHER_SPAN, OTHER_TRACE, TURN_SPAN, TURN_TRACE
from joiner_stubs import ManualClock as _Clock
from joiner_stubs import TurnStub as _Turn
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy.joiner import HOLD_S, Joiner

AGENT = b"\x01" * 16


def _id(name: str) -> bytes:
    return name.encode().ljust(8, b"_")


def _span(name: str, start: int, parent: str = "", trace: bytes = AGENT, **attrs: str) -> Span:
    span = Span(
        name=name,
        trace_id=trace,
        span_id=_id(name),
        parent_span_id=_id(parent) if parent else b"",
        start_time_unix_nano=start,
    )
    for key, value in attrs.items():
        span.attributes.add(key=key.replace("__", ".")).value.string_value = value
    return span


def _request(*spans: Span) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request


def _out(request: ExportTraceServiceRequest | None) -> dict[str, tuple[bytes, bytes]]:
    """The spans of a request, by name: (trace id, parent span id)."""
    if request is None:
        return {}
    return {
        s.name: (s.trace_id, s.parent_span_id)
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }


def _join(joiner: Joiner, *spans: Span) -> dict[str, tuple[bytes, bytes]]:
    request = _request(*spans)
    joiner.join_spans(request)
    return _out(request)


def _links(request: ExportTraceServiceRequest, name: str) -> list[tuple[bytes, bytes]]:
    (span,) = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans if s.name == name]
    return [(link.trace_id, link.span_id) for link in span.links]


def test_a_turn_told_by_the_engine_holds_the_spans_that_start_in_it_and_no_others() -> None:
    joiner = Joiner()
    turn = _Turn()
    joiner.turn_started(turn, at_ns=1000)
    joiner.turn_ended(turn, at_ns=2000)
    (window,) = joiner.windows()
    assert (window.trace_id, window.span_id, window.session_id) == (TURN_TRACE, TURN_SPAN, "sess-1")
    assert (window.start_ns, window.end_ns) == (1000, 2000)
    assert _join(joiner, _span("in", 1500), _span("after", 2500), _span("before", 500)) == {
        "in": (TURN_TRACE, TURN_SPAN),
        "after": (AGENT, b""),
        "before": (AGENT, b""),
    }


def test_a_turn_without_times_starts_and_ends_now() -> None:
    joiner = Joiner()
    turn = _Turn()
    before = time.time_ns()
    joiner.turn_started(turn)
    assert _join(joiner, _span("in", time.time_ns())) == {"in": (TURN_TRACE, TURN_SPAN)}
    joiner.turn_ended(turn)
    (window,) = joiner.windows()
    assert window.end_ns is not None and before <= window.start_ns <= window.end_ns <= time.time_ns()
    later = time.time_ns() + 10**12
    assert _join(joiner, _span("later", later)) == {"later": (AGENT, b"")}


def test_turns_of_two_sessions_at_once_take_the_spans_their_session_attribute_names() -> None:
    joiner = Joiner(session_keys=("qwen.session",))
    joiner.turn_started(_Turn(0xAA, 0xBB, "sess-1"), at_ns=1000)
    joiner.turn_started(_Turn(0xCC, 0xDD, "sess-2"), at_ns=1000)
    assert _join(
        joiner,
        _span("one", 1500, session__id="sess-1"),
        _span("two", 1500, qwen__session="sess-2"),
        _span("neither", 1500),
    ) == {"one": (TURN_TRACE, TURN_SPAN), "two": (OTHER_TRACE, OTHER_SPAN), "neither": (AGENT, b"")}
    joiner.open_window(7, 0xEE, 0xFF, "sess-3", 1000)
    joiner.close_window(7, 1200)
    assert [(w.session_id, w.end_ns) for w in joiner.windows()] == [
        ("sess-1", None),
        ("sess-2", None),
        ("sess-3", 1200),
    ]


def test_a_span_in_several_turns_without_a_session_is_linked_to_each_once() -> None:
    joiner = Joiner()
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    joiner.open_window(2, 0xCC, 0xDD, "sess-2", 1000)
    request = _request(_span("child", 1600, parent="both"), _span("both", 1500))  # the child exported first
    joiner.join_spans(request)
    assert _links(request, "both") == [(TURN_TRACE, TURN_SPAN), (OTHER_TRACE, OTHER_SPAN)]
    assert _out(request) == {"child": (AGENT, _id("both")), "both": (AGENT, b"")}
    assert joiner.spans_linked == 1


def test_a_child_exported_before_its_parent_waits_for_it_then_follows_it() -> None:
    clock = _Clock()
    joiner = Joiner(clock=clock)
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    joiner.close_window(1, 2000)
    assert _join(joiner, _span("child", 2500, parent="parent")) == {}  # after the turn: its parent may be in it
    assert joiner.held() == 1
    assert _join(joiner, _span("parent", 1500)) == {
        "parent": (TURN_TRACE, TURN_SPAN),
        "child": (TURN_TRACE, _id("parent")),  # background work of the turn follows it
    }
    assert joiner.held() == 0 and joiner.spans_moved == 2
    # A parent decided in an earlier request: its child follows it at once.
    assert _join(joiner, _span("late", 3000, parent="parent")) == {"late": (TURN_TRACE, _id("parent"))}
    assert joiner.release() is None and joiner.release(everything=True) is None


def test_a_child_whose_parent_never_comes_goes_as_it_came_at_the_bound_not_before() -> None:
    clock = _Clock()
    joiner = Joiner(clock=clock)
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    joiner.close_window(1, 2000)
    assert _join(joiner, _span("orphan", 2500, parent="gone")) == {}
    clock.now = HOLD_S - 0.1
    assert joiner.release() is None and joiner.held() == 1
    clock.now = HOLD_S
    assert _out(joiner.release()) == {"orphan": (AGENT, _id("gone"))}
    assert joiner.held() == 0


def test_a_span_starting_at_the_first_turn_waits_for_its_parent_one_before_it_does_not() -> None:
    joiner = Joiner(clock=_Clock())
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    assert _join(joiner, _span("early", 999, parent="process")) == {"early": (AGENT, _id("process"))}
    assert _join(joiner, _span("edge", 1000, parent="process")) == {}
    assert joiner.held() == 1
    assert _out(joiner.release(everything=True)) == {"edge": (TURN_TRACE, TURN_SPAN)}  # in the turn: under it


def test_spans_already_in_a_turns_trace_stay_as_they_are_and_their_logs_go_at_once() -> None:
    joiner = Joiner(clock=_Clock())
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    span = _span("own", 1500, parent="x", trace=TURN_TRACE)
    span.parent_span_id = TURN_SPAN
    assert _join(joiner, span) == {"own": (TURN_TRACE, TURN_SPAN)}
    logs = ExportLogsServiceRequest()
    logs.resource_logs.add().scope_logs.add().log_records.add(trace_id=TURN_TRACE, span_id=_id("own"))
    joiner.join_logs(logs)
    assert len(logs.resource_logs[0].scope_logs[0].log_records) == 1 and joiner.logs_waiting() == 0


def test_by_default_every_span_is_forwarded_else_only_what_a_user_reads() -> None:
    joiner = Joiner(clock=_Clock())
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    assert set(_join(joiner, _span("noise", 1500))) == {"noise"}
    joiner = Joiner(clock=_Clock(), all_spans=False)
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    assert _join(joiner, _span("noise", 1500), _span("chat", 1500, gen_ai__operation__name="chat")) == {
        "chat": (TURN_TRACE, TURN_SPAN)
    }
    assert joiner.spans_left_out == 1
    assert _join(joiner, _span("child", 1600, parent="held_noise")) == {}
    assert joiner.release(everything=True) is None  # released, then left out: nothing to send
    assert joiner.spans_left_out == 2


def test_the_agents_spans_of_a_tool_call_go_under_the_proxys_span_of_it() -> None:
    joiner = Joiner(clock=_Clock())
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    asked: list[tuple[bytes, str]] = []

    def lookup(trace_id: bytes, tool_call_id: str) -> bytes | None:
        asked.append((trace_id, tool_call_id))
        return b"proxytoo" if tool_call_id == "call_1" else None

    joiner.proxy_tools(lookup)
    told: list[int] = []
    joiner.on_tool_span = lambda: told.append(1)
    assert joiner.on_tool_span is not None
    assert _join(
        joiner,
        _span("run", 1500, gen_ai__tool__call__id="call_1"),
        _span("other", 1500, gen_ai__tool__call__id="call_2"),
    ) == {"run": (TURN_TRACE, b"proxytoo"), "other": (TURN_TRACE, TURN_SPAN)}
    assert asked == [(TURN_TRACE, "call_1"), (TURN_TRACE, "call_2")] and told == []
    tool = _span("tool", 1500, gen_ai__operation__name="execute_tool", gen_ai__tool__call__id="call_3")
    _join(joiner, tool)
    assert told == [1] and joiner.tool_span(TURN_TRACE, "call_3") == _id("tool")


def test_a_cycle_of_parents_in_one_request_is_held_then_goes_at_the_bound() -> None:
    joiner = Joiner(clock=_Clock())
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    assert _join(joiner, _span("a", 1500, parent="b"), _span("b", 1500, parent="a")) == {}  # hostile
    assert joiner.held() == 2
    out = _out(joiner.release(everything=True))
    assert set(out) == {"a", "b"} and all(trace == TURN_TRACE for trace, _ in out.values())


def test_a_span_exported_again_while_its_first_copy_waits_does_not_stop_its_children_joining() -> None:
    joiner = Joiner(clock=_Clock())
    joiner.open_window(1, 0xAA, 0xBB, "sess-1", 1000)
    assert _join(joiner, _span("x", 1500, parent="p")) == {}
    request = _request(_span("y", 1600, parent="x"), _span("x", 1500, parent="p"), _span("p", 1400))
    joiner.join_spans(request)
    spans = [(s.name, s.trace_id) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert ("y", TURN_TRACE) in spans and ("p", TURN_TRACE) in spans and ("x", TURN_TRACE) in spans
    assert joiner.held() == 0
