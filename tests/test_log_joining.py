"""The agent's log records joined to the proxy's turns (``acp_otel._proxy.log_joining``, through the joiner): the
trace id a record ends with, whether it goes out at once or waits for its span, and when a waiting one goes."""

from __future__ import annotations

from typing import Any

from joiner_stubs import OTHER_SPAN, OTHER_TRACE, TURN_SPAN, TURN_TRACE
from joiner_stubs import ManualClock as _Clock
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy.joiner import Joiner

AGENT_TRACE = b"\x01" * 16


def _joiner(*turns: tuple[int, int, int, int | None], **kwargs: Any) -> Joiner:
    """A joiner with turns ``(trace id, span id, start, end)`` (end ``None``: still open)."""
    joiner = Joiner(clock=kwargs.pop("clock", _Clock()), **kwargs)
    for key, (trace_id, span_id, start, end) in enumerate(turns):
        joiner.open_window(key, trace_id, span_id, f"sess-{key}", start)
        if end is not None:
            joiner.close_window(key, end)
    return joiner


def _span(name: str, start: int, parent: bytes = b"") -> Span:
    return Span(
        name=name,
        trace_id=AGENT_TRACE,
        span_id=name.encode().ljust(8, b"_"),
        parent_span_id=parent,
        start_time_unix_nano=start,
    )


def _spans(*spans: Span) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request


def _logs(*records: tuple[bytes, bytes, int, int]) -> ExportLogsServiceRequest:
    """Records ``(trace id, span id, time, observed time)``, their bodies numbered in order."""
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for n, (trace_id, span_id, at, observed) in enumerate(records):
        record = scope.log_records.add(
            trace_id=trace_id, span_id=span_id, time_unix_nano=at, observed_time_unix_nano=observed
        )
        record.body.string_value = f"record {n}"
    return request


def _records(request: ExportLogsServiceRequest | None) -> list[tuple[str, bytes, bytes]]:
    if request is None:
        return []
    return [
        (r.body.string_value, r.trace_id, r.span_id)
        for rl in request.resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
    ]


def test_a_record_without_a_span_gets_the_context_of_the_one_turn_open_at_its_time() -> None:
    joiner = _joiner((0xAA, 0xBB, 1000, 2000), (0xCC, 0xDD, 3000, 4000), (0xEE, 0xFF, 3500, None))
    request = _logs(
        (b"", b"", 1500, 0),  # in the first turn
        (b"", b"", 0, 1200),  # no time of its own: its observed time, in the first turn
        (b"", b"", 2500, 0),  # between turns
        (b"", b"", 3200, 0),  # in the second turn only
        (b"", b"", 3600, 0),  # in two turns at once: none
        (b"", b"", 0, 0),  # no time at all
    )
    joiner.join_logs(request)
    assert _records(request) == [
        ("record 0", TURN_TRACE, TURN_SPAN),
        ("record 1", TURN_TRACE, TURN_SPAN),
        ("record 2", b"", b""),
        ("record 3", OTHER_TRACE, OTHER_SPAN),
        ("record 4", b"", b""),
        ("record 5", b"", b""),
    ]
    assert joiner.logs_waiting() == 0


def test_a_record_with_a_trace_id_and_no_span_goes_out_at_once_as_it_came() -> None:
    joiner = _joiner((0xAA, 0xBB, 1000, None))
    request = _logs((AGENT_TRACE, b"", 1500, 0))
    joiner.join_logs(request)
    assert _records(request) == [("record 0", AGENT_TRACE, b"")]
    assert joiner.logs_waiting() == 0 and joiner.ready_logs(everything=True) is None


def test_a_record_whose_span_was_joined_before_it_came_goes_out_at_once_in_the_turns_trace() -> None:
    joiner = _joiner((0xAA, 0xBB, 1000, None))
    top, child = _span("top", 1500), _span("child", 1600)
    child.parent_span_id = top.span_id
    joiner.join_spans(_spans(top, child))
    request = _logs((AGENT_TRACE, top.span_id, 1700, 0), (AGENT_TRACE, child.span_id, 1700, 0))
    joiner.join_logs(request)
    assert _records(request) == [("record 0", TURN_TRACE, top.span_id), ("record 1", TURN_TRACE, child.span_id)]
    assert joiner.logs_waiting() == 0


def test_a_record_of_a_span_left_alone_or_linked_keeps_its_trace_id() -> None:
    joiner = _joiner((0xAA, 0xBB, 1000, 2000), (0xCC, 0xDD, 3000, None), (0xEE, 0xFF, 3000, None))
    before = _span("before", 500)  # before every turn: left alone
    both = _span("both", 3500)  # in two turns at once, no session attribute: left alone and linked
    joiner.join_spans(_spans(before, both))
    for span in (before, both):
        request = _logs((AGENT_TRACE, span.span_id, 3600, 0))
        joiner.join_logs(request)
        assert _records(request) == [("record 0", AGENT_TRACE, span.span_id)]
    waiting = _logs((AGENT_TRACE, before.span_id, 3600, 0), (AGENT_TRACE, both.span_id, 3600, 0))
    clock = _Clock()
    joiner = _joiner((0xAA, 0xBB, 1000, 2000), (0xCC, 0xDD, 3000, None), (0xEE, 0xFF, 3000, None), clock=clock)
    joiner.join_logs(waiting)  # before their spans: they wait, then follow them
    joiner.join_spans(_spans(_span("before", 500), _span("both", 3500)))
    assert _records(joiner.ready_logs()) == [
        ("record 0", AGENT_TRACE, before.span_id),
        ("record 1", AGENT_TRACE, both.span_id),
    ]


def test_in_one_request_the_records_that_wait_are_taken_out_and_the_others_stay() -> None:
    joiner = _joiner((0xAA, 0xBB, 1000, None))
    request = _logs(
        (b"", b"", 1500, 0),
        (AGENT_TRACE, b"later___", 1500, 0),
        (AGENT_TRACE, b"", 1500, 0),
        (AGENT_TRACE, b"later___", 1600, 0),
    )
    joiner.join_logs(request)
    assert _records(request) == [("record 0", TURN_TRACE, TURN_SPAN), ("record 2", AGENT_TRACE, b"")]
    assert joiner.logs_waiting() == 2


def test_a_waiting_record_goes_when_its_span_comes_not_before_and_whatever_waits_beside_it() -> None:
    clock = _Clock()
    joiner = _joiner((0xAA, 0xBB, 1000, None), clock=clock)
    request = _logs(
        (AGENT_TRACE, b"never___", 1500, 0),  # its span never comes
        (AGENT_TRACE, b"late____", 1500, 0),
        (AGENT_TRACE, b"never___", 1600, 0),
        (AGENT_TRACE, b"late____", 1600, 0),
    )
    joiner.join_logs(request)
    assert _records(request) == [] and joiner.logs_waiting() == 4
    clock.now = 10.0
    assert joiner.ready_logs() is None  # nothing came, no bound past
    joiner.join_spans(_spans(_span("late", 1500)))
    assert _records(joiner.ready_logs()) == [
        ("record 1", TURN_TRACE, b"late____"),
        ("record 3", TURN_TRACE, b"late____"),
    ]
    assert joiner.logs_waiting() == 2 and joiner.ready_logs() is None
    assert _records(joiner.ready_logs(everything=True)) == [
        ("record 0", AGENT_TRACE, b"never___"),
        ("record 2", AGENT_TRACE, b"never___"),
    ]
