"""Only what a user reads of the agent's spans (``acp_otel._proxy.span_filter``): which spans are forwarded or left
out, the parent each forwarded span ends with (nothing dangles), ancestors that come in a later request, the HTTP
calls inside a model call, log records naming a left-out span, and the counts."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy import span_filter
from acp_otel._proxy.span_filter import SpanFilter, is_http_client, is_read

TRACE = b"\x01" * 16
TURN = b"turn____"
INTERNAL, SERVER, CLIENT = 1, 2, 3


def _id(name: str) -> bytes:
    return name.encode().ljust(8, b"_")


def _span(name: str, parent: str = "", operation: str = "", kind: int = INTERNAL, method: str = "") -> Span:
    span = Span(name=name, trace_id=TRACE, span_id=_id(name), parent_span_id=_id(parent) if parent else b"", kind=kind)
    if operation:
        span.attributes.add(key="gen_ai.operation.name").value.string_value = operation
    if method:
        span.attributes.add(key=method).value.string_value = "POST"
    return span


def _request(*spans: Span) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request


def _out(span_filter: SpanFilter, *spans: Span) -> dict[str, str]:
    """Filter one request of ``spans``: the forwarded ones, by name, with their parent's name."""
    request = _request(*spans)
    span_filter.filter(request)
    return {
        s.name: s.parent_span_id.rstrip(b"_").decode()
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    }


def _filter() -> SpanFilter:
    return SpanFilter(is_turn=lambda key: key == (TRACE, TURN))


def test_what_a_user_reads_is_forwarded_with_its_ancestors_the_rest_left_out_and_counted() -> None:
    assert span_filter.READ == {"chat", "generate_content", "text_completion", "embeddings", "execute_tool"} | {
        "invoke_agent",
        "create_agent",
        "invoke_workflow",
    }
    f = _filter()
    spans = [
        _span("loop", "turn"),
        _span("agent", "loop", "invoke_agent"),
        _span("internal", "agent"),
        _span("model", "internal", "chat"),
        _span("sql", "model"),
        _span("tool", "agent", "execute_tool"),
        _span("config", "loop"),
        _span("flow", "turn", "invoke_workflow"),
        _span("embed", "turn", "embeddings"),
        _span("other", "turn", "something_else"),
    ]
    assert _out(f, *spans) == {
        "loop": "turn",
        "agent": "loop",
        "internal": "agent",  # an ancestor of a model call
        "model": "internal",
        "tool": "agent",
        "flow": "turn",
        "embed": "turn",
    }
    assert (f.left_out, f.forwarded) == (3, 7)
    assert _out(f, _span("gen", "turn", "generate_content"), _span("text", "turn", "text_completion")) == {
        "gen": "turn",
        "text": "turn",
    }
    assert _out(f, _span("create", "turn", "create_agent")) == {"create": "turn"}
    assert (f.left_out, f.forwarded) == (3, 10)


def test_a_forwarded_span_whose_parent_was_left_out_hangs_from_its_nearest_forwarded_ancestor() -> None:
    f = _filter()
    spans = [
        _span("agent", "turn", "invoke_agent"),
        _span("step", "agent"),
        _span("inner", "step"),
        _span("model", "inner", "chat"),
        _span("wrap", "agent"),
        _span("deeper", "wrap"),
        _span("tool", "deeper", "execute_tool"),
        _span("root_work"),
        _span("root_model", "root_work", "chat"),
    ]
    spans[1].attributes.add(key="x").value.string_value = "y"
    # step and inner are ancestors of the model call: forwarded; wrap and deeper too (of the tool call).
    assert _out(f, *spans) == {
        "agent": "turn",
        "step": "agent",
        "inner": "step",
        "model": "inner",
        "wrap": "agent",
        "deeper": "wrap",
        "tool": "deeper",
        "root_work": "",
        "root_model": "root_work",
    }
    # In a later request: children of spans left out before skip them.
    f = _filter()
    assert _out(f, _span("agent", "turn", "invoke_agent"), _span("noise", "agent"), _span("more", "noise")) == {
        "agent": "turn"
    }
    assert _out(f, _span("model", "more", "chat"), _span("sub", "model")) == {"model": "agent"}
    assert (f.left_out, f.forwarded) == (3, 2)
    f = _filter()
    assert _out(f, _span("top"), _span("noise", "top")) == {}
    assert _out(f, _span("model", "noise", "chat")) == {"model": ""}  # no forwarded ancestor: a root


def test_an_ancestor_that_comes_later_is_forwarded_when_it_does() -> None:
    f = _filter()
    assert _out(f, _span("model", "agent", "chat"), _span("sql", "model")) == {"model": "agent"}
    assert _out(f, _span("agent", "loop")) == {"agent": "loop"}  # no operation, but the model call's parent
    assert _out(f, _span("loop", "turn"), _span("cfg", "loop")) == {"loop": "turn"}
    assert _out(f, _span("agent2", "loop")) == {}  # not needed by anything
    assert (f.left_out, f.forwarded) == (3, 3)


def test_http_calls_are_forwarded_inside_a_model_call_or_where_one_may_still_come() -> None:
    assert is_http_client(_span("POST", kind=CLIENT, method="http.request.method"))
    assert is_http_client(_span("POST", kind=CLIENT, method="http.method"))  # the older convention
    assert not is_http_client(_span("POST", kind=SERVER, method="http.request.method"))
    assert not is_http_client(_span("POST", kind=CLIENT, method="url.full"))
    assert is_read(_span("m", operation="chat")) and not is_read(_span("m", operation="llm_call"))
    f = _filter()
    spans = [
        _span("model", "turn", "chat"),
        _span("stream", "model"),
        _span("side", "stream"),
        _span("POST", "stream", kind=CLIENT, method="http.request.method"),
        _span("GET", "turn", kind=CLIENT, method="http.request.method"),  # under the turn: no model call
        _span("work", "turn"),
        _span("PUT", "work", kind=CLIENT, method="http.method"),  # its ancestors came, none a model call
        _span("root"),
        _span("HEAD", "root", kind=CLIENT, method="http.method"),  # up to a root: none
        _span("SERVE", "model", kind=SERVER, method="http.request.method"),  # not a client
    ]
    assert _out(f, *spans) == {"model": "turn", "stream": "model", "POST": "stream"}
    # Whose ancestors have not all come: the model call may end later.
    assert _out(f, _span("wait", "later"), _span("PATCH", "wait", kind=CLIENT, method="http.method")) == {
        "PATCH": "wait",
        "wait": "later",
    }
    assert _out(f, _span("DIRECT", "unknown", kind=CLIENT, method="http.method")) == {"DIRECT": "unknown"}
    # Whose nearest seen ancestor's parent is a known span left out: decided by what is above it.
    assert _out(f, _span("under", "work"), _span("DEL", "under", kind=CLIENT, method="http.method")) == {}
    # Under a forwarded span that is no model call (an ancestor of one), itself under the turn: none.
    assert _out(
        f,
        _span("outer", "turn"),
        _span("outer_model", "outer", "chat"),
        _span("CONNECT", "outer", kind=CLIENT, method="http.method"),
    ) == {"outer": "turn", "outer_model": "outer"}
    assert _out(f, _span("TRACE", "outer", kind=CLIENT, method="http.method")) == {}  # in a later request too
    # Inside a model call of an earlier request, through a span left out.
    assert _out(f, _span("OPT", "side", kind=CLIENT, method="http.method")) == {"OPT": "stream"}


def test_a_cycle_of_parents_ends_the_walk_up() -> None:
    f = _filter()
    a, b = _span("a", "b"), _span("b", "a")
    client = _span("GET", "a", kind=CLIENT, method="http.method")
    assert _out(f, a, b, client) == {}
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.add(trace_id=TRACE, span_id=_id("a"))
    f.repoint_logs(request)
    assert request.resource_logs[0].scope_logs[0].log_records[0].span_id == b""


def test_log_records_naming_a_left_out_span_name_its_nearest_forwarded_ancestor() -> None:
    f = _filter()
    _out(f, _span("agent", "turn", "invoke_agent"), _span("noise", "agent"), _span("deep", "noise"), _span("lone"))
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    for name in ("deep", "noise", "agent", "lone", "unseen", ""):
        records.add(trace_id=TRACE, span_id=_id(name) if name else b"")
    f.repoint_logs(request)
    assert [r.span_id for r in records] == [_id("agent"), _id("agent"), _id("agent"), b"", _id("unseen"), b""]
    assert [r.trace_id for r in records] == [TRACE] * 6


def test_everything_forwards_every_span_and_leaves_records_alone() -> None:
    f = SpanFilter(everything=True)
    assert _out(f, _span("noise", "x"), _span("more", "noise")) == {"noise": "x", "more": "noise"}
    assert (f.left_out, f.forwarded) == (0, 0)
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.add(trace_id=TRACE, span_id=_id("noise"))
    f.repoint_logs(request)
    assert request.resource_logs[0].scope_logs[0].log_records[0].span_id == _id("noise")
    assert _out(SpanFilter(), _span("noise", "x")) == {}  # the default: only what a user reads


def test_the_spans_remembered_are_bounded_the_oldest_forgotten_first(monkeypatch: Any) -> None:
    monkeypatch.setattr(span_filter, "MAX_KNOWN", 3)
    f = _filter()
    assert _out(f, _span("agent", "turn", "invoke_agent"), _span("noise", "agent")) == {"agent": "turn"}
    assert _out(f, _span("n2", "turn"), _span("n3", "turn")) == {}
    # "agent", then "noise" (the oldest) are forgotten: a model call under "noise" hangs from it as it came.
    assert _out(f, _span("model", "noise", "chat")) == {"model": "noise"}
    f = _filter()
    assert _out(f, _span("agent", "turn", "invoke_agent"), _span("noise", "agent")) == {"agent": "turn"}
    assert _out(f, _span("n2", "turn")) == {}  # at the bound: all remembered
    # "agent" is forgotten as the model call comes, "noise" is not: the model call skips it.
    assert _out(f, _span("model", "noise", "chat")) == {"model": "agent"}


def test_ancestors_awaited_are_bounded_the_oldest_forgotten_first(monkeypatch: Any) -> None:
    monkeypatch.setattr(span_filter, "MAX_KNOWN", 2)
    f = _filter()
    assert _out(f, _span("m1", "b", "chat")) == {"m1": "b"}
    assert _out(f, _span("m2", "a", "chat")) == {"m2": "a"}  # b and a awaited: at the bound
    assert _out(f, _span("a")) == {"a": ""}  # came: no longer awaited
    assert _out(f, _span("m3", "c", "chat")) == {"m3": "c"}  # b and c awaited
    assert _out(f, _span("b"), _span("c")) == {"b": "", "c": ""}
    f = _filter()
    assert _out(f, _span("m1", "b", "chat")) == {"m1": "b"}
    assert _out(f, _span("noise")) == {}
    assert _out(f, _span("m2", "noise", "chat")) == {"m2": ""}  # no forwarded ancestor: nothing awaited
    assert _out(f, _span("m3", "c", "chat")) == {"m3": "c"}  # b and c awaited
    assert _out(f, _span("b"), _span("c")) == {"b": "", "c": ""}
    f = _filter()
    for model, parent in (("m1", "b"), ("m2", "a"), ("m3", "c")):
        assert _out(f, _span(model, parent, "chat")) == {model: parent}
    assert _out(f, _span("b"), _span("a"), _span("c")) == {"a": "", "c": ""}  # b, the oldest, forgotten
