"""The hot path's shortcuts give what the OpenTelemetry API functions they replace give."""

from __future__ import annotations

from typing import Any

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider

from acp_otel import _propagation
from acp_otel._metrics import Instruments
from acp_otel._settings import load_settings


def test_carrier_for_span_matches_the_context_it_stands_for() -> None:
    tracer = TracerProvider().get_tracer("t")
    parent_span = tracer.start_span("parent")
    child = tracer.start_span("child", context=trace.set_span_in_context(parent_span))
    for parent in (
        Context(),
        trace.set_span_in_context(parent_span, Context()),
        baggage.set_baggage("k", "v", trace.set_span_in_context(parent_span, Context())),
    ):
        expected = _propagation.carrier_for(trace.set_span_in_context(child, parent))
        assert _propagation.carrier_for(parent, child) == expected
        assert expected["traceparent"].split("-")[2] == format(child.get_span_context().span_id, "016x")
    # No parent means the current context (baggage included), as for set_span_in_context; an empty one does not.
    token = otel_context.attach(baggage.set_baggage("b", "1", Context()))
    try:
        carrier = _propagation.carrier_for(None, child)
        assert carrier == _propagation.carrier_for(trace.set_span_in_context(child, None))
        assert carrier["baggage"] == "b=1"
        assert "baggage" not in _propagation.carrier_for(Context(), child)
    finally:
        otel_context.detach(token)


class _Recorder:
    def __init__(self) -> None:
        self.records: list[tuple[float, dict[str, Any]]] = []

    def record(self, value: float, attributes: dict[str, Any]) -> None:
        self.records.append((value, dict(attributes)))


class _Meter:
    def create_histogram(self, *args: Any, **kwargs: Any) -> _Recorder:
        return _Recorder()

    def create_counter(self, *args: Any, **kwargs: Any) -> _Recorder:
        return _Recorder()


def test_cached_metric_attributes_are_bounded_like_fresh_ones() -> None:
    instruments = Instruments(_Meter())  # type: ignore[arg-type]
    names = [f"agent-{i}" for i in range(20)]
    for _ in range(2):  # the second pass comes from the cache
        seen = [instruments.turn_attributes(n, "end_turn", None)["gen_ai.agent.name"] for n in names]
        assert seen == names[:16] + ["_OTHER"] * 4
    assert instruments.turn_attributes(None, None, None) == {"gen_ai.operation.name": "invoke_agent"}
    assert instruments.turn_attributes("agent-0", "weird", "E") == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "agent-0",
        "acp.stop_reason": "weird",
        "error.type": "E",
    }
    assert instruments.tool_attributes("agent-0", "Read", "read", "failed") == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.agent.name": "agent-0",
        "gen_ai.tool.name": "Read",
        "acp.tool_call.kind": "read",
        "acp.tool_call.status": "failed",
        "error.type": "tool_error",
    }
    assert instruments.tool_attributes(None, None, "nonsense", "odd") == {
        "gen_ai.operation.name": "execute_tool",
        "acp.tool_call.kind": "_OTHER",
        "acp.tool_call.status": "_OTHER",
    }
    tools = [f"tool-{i}" for i in range(40)]  # "Read" above is the first of 32 kept
    for _ in range(2):
        seen = [instruments.tool_attributes(None, t, "read", "completed")["gen_ai.tool.name"] for t in tools]
        assert seen == tools[:31] + ["_OTHER"] * 9
    assert instruments.agent_only_attributes("agent-1") == {"gen_ai.agent.name": "agent-1"}
    currencies = [instruments.cost_attributes("agent-1", f"C{i}")["acp.usage.cost.currency"] for i in range(10)]
    assert currencies == [f"C{i}" for i in range(8)] + ["_OTHER"] * 2
    assert instruments.cost_attributes("agent-1", "C3") == {
        "gen_ai.agent.name": "agent-1",
        "acp.usage.cost.currency": "C3",
    }
    assert instruments.request_attributes("session/prompt", "-32603") == {
        "acp.method.name": "session/prompt",
        "error.type": "-32603",
    }


def test_attribute_cache_is_capped() -> None:
    instruments = Instruments(_Meter())  # type: ignore[arg-type]
    for i in range(5000):
        instruments.turn_attributes("a", None, f"E{i}")
    assert len(instruments._cache) <= 1024
    assert instruments.turn_attributes("a", None, "E4999") == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "a",
        "error.type": "_OTHER",
    }


def test_settings_still_load() -> None:
    assert load_settings({}).notification_spans in ("turn", "all", "events", "none")


def test_no_instruments_for_a_noop_meter_provider() -> None:
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.sdk.metrics import MeterProvider

    from acp_otel._metrics import make_instruments

    assert make_instruments(NoOpMeterProvider(), "0") is None
    assert make_instruments(MeterProvider(), "0") is not None


def test_fast_path_repeats_give_what_the_real_propagators_give() -> None:
    from opentelemetry import propagate
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    from acp_otel import _w3c_fast

    fast = _w3c_fast.for_propagator(propagate.get_global_textmap())
    assert fast is not None
    contexts = [
        SpanContext(0x1234, 0x99, False, TraceFlags(1)),
        SpanContext(0x1234, 0x98, False, TraceFlags(0), TraceState([("a", "1")])),
        SpanContext(0xABCDEF, 0x42, False, TraceFlags(1)),
    ]
    # The same span context twice in a row (cached), then another, then back.
    for span_context in (contexts[0], contexts[0], contexts[1], contexts[1], contexts[0], contexts[2], contexts[0]):
        ctx = trace.set_span_in_context(NonRecordingSpan(span_context), Context())
        expected: dict[str, str] = {}
        propagate.inject(expected, context=ctx)
        assert fast.inject(ctx) == expected
        with_baggage = baggage.set_baggage("k", "v", ctx)
        expected_b: dict[str, str] = {}
        propagate.inject(expected_b, context=with_baggage)
        assert fast.inject(with_baggage) == expected_b
    headers = ["00-" + "1" * 32 + "-" + "2" * 16 + "-01", "00-" + "3" * 32 + "-" + "4" * 16 + "-00"]
    for traceparent in (headers[0], headers[0], headers[1], headers[0]):
        for carrier in ({"traceparent": traceparent}, {"traceparent": traceparent, "baggage": "k=v"}):
            got = fast.extract(carrier)
            want = propagate.extract(carrier, context=Context())
            assert got is not None
            assert trace.get_current_span(got).get_span_context() == trace.get_current_span(want).get_span_context()
            assert baggage.get_all(got) == baggage.get_all(want)


# ------------------------------------------------------------------ the engine's caches


def _engine_and_exporter() -> tuple[Any, Any]:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from acp_otel._engine import Engine

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Engine(provider.get_tracer("t"), load_settings({}, {})), exporter


class _Peer:
    pass


def _message(method: str, params: dict[str, Any], request_id: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return message


def test_suppression_is_seen_although_the_last_context_was_enabled() -> None:
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    engine, exporter = _engine_and_exporter()
    peer = _Peer()
    # The same current context twice (its facts cached), then a suppressed one, then the first again.
    for suppressed in (False, False, True, False):
        if suppressed:
            with suppress_instrumentation():
                call, params = engine.begin_outgoing(peer, "session/new", {"cwd": "/"}, 1)
            assert call is None and params == {"cwd": "/"}  # no span, nothing injected
        else:
            call, params = engine.begin_outgoing(peer, "session/new", {"cwd": "/"}, 1)
            assert call is not None and "traceparent" in params["_meta"]
            engine.end_result(call, {"sessionId": "s"})
    assert len(exporter.get_finished_spans()) == 3


def test_a_request_handler_that_suppresses_instrumentation_sends_untraced() -> None:
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    engine, exporter = _engine_and_exporter()
    agent = _Peer()
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    call, _, context = engine.begin_incoming(agent, _message("x/y", {"_meta": {"traceparent": tp}}, 3), True)
    assert call is not None
    token = otel_context.attach(context)  # the handler runs here: its facts are known to the engine
    try:
        sent, params = engine.begin_outgoing(agent, "fs/read_text_file", {"path": "/a"}, 9)
        assert sent is not None and params["_meta"]["traceparent"].split("-")[1] == tp.split("-")[1]
        engine.end_result(sent, {})
        with suppress_instrumentation():
            assert engine.begin_outgoing(agent, "fs/read_text_file", {"path": "/a"}, 10) == (None, {"path": "/a"})
    finally:
        otel_context.detach(token)
    engine.end_payload(call, {"jsonrpc": "2.0", "id": 3, "result": {}})
    assert sorted(s.name for s in exporter.get_finished_spans()) == ["fs/read_text_file", "x/y"]


def test_connection_state_goes_with_the_connection_and_is_not_inherited_through_a_reused_id() -> None:
    import gc

    engine, _ = _engine_and_exporter()
    peer = _Peer()
    state = engine.peer_state(peer)
    assert state is not None and engine.peer_state(peer) is state
    state.attributes["gen_ai.agent.name"] = "a"
    other = _Peer()
    # Another object at the key of this one (as when a collected peer's id is reused) gets a state of its own,
    # in the lookup the engine makes per message as in peer_state().
    engine._peers[id(other)] = state
    call, _ = engine.begin_outgoing(other, "_x.dev/ping", {}, 1)
    assert call is not None and call.span is not None
    assert "gen_ai.agent.name" not in call.span.attributes  # type: ignore[attr-defined]
    engine.end_result(call, {})
    fresh = engine.peer_state(other)
    assert fresh is not state and fresh is not None and fresh.attributes == {}
    del peer, other, fresh
    gc.collect()
    assert engine._peers == {}


def test_start_attributes_cached_per_connection_follow_what_initialize_teaches() -> None:
    engine, exporter = _engine_and_exporter()
    client = _Peer()
    early, _ = engine.begin_outgoing(client, "_x.dev/ping", {"sessionId": "s"}, 0)
    engine.end_result(early, {})
    init, _ = engine.begin_outgoing(client, "initialize", {"protocolVersion": 1}, 1)
    engine.end_result(init, {"protocolVersion": 1, "agentInfo": {"name": "agent", "version": "2"}})
    for request_id in (2, 3):  # built once, then from the cache: the same attributes, each its own id
        later, _ = engine.begin_outgoing(client, "_x.dev/ping", {"sessionId": "s"}, request_id)
        engine.end_result(later, {})
    first, _, second, third = (dict(s.attributes) for s in exporter.get_finished_spans())
    assert "gen_ai.agent.name" not in first
    assert second["gen_ai.agent.name"] == third["gen_ai.agent.name"] == "agent"
    assert (second["jsonrpc.request.id"], third["jsonrpc.request.id"]) == ("2", "3")
    assert {k: v for k, v in second.items() if k != "jsonrpc.request.id"} == {
        k: v for k, v in third.items() if k != "jsonrpc.request.id"
    }


def test_a_request_handler_runs_in_the_senders_context_under_its_span() -> None:
    engine, _ = _engine_and_exporter()
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    meta = {"traceparent": tp, "baggage": "user=alice"}
    call, _, context = engine.begin_incoming(_Peer(), _message("x/y", {"_meta": meta}, 3), True)
    assert call is not None and call.span is not None
    # What trace.set_span_in_context(span, sender's context) gives, plus the engine's own entry.
    sender = _propagation.context_from_carrier(meta)
    expected = trace.set_span_in_context(call.span, sender)
    assert trace.get_current_span(context) is call.span
    assert baggage.get_all(context) == baggage.get_all(expected) == {"user": "alice"}
    assert all(context[key] == value for key, value in expected.items()) and len(context) == len(expected) + 1
    assert isinstance(context, Context)
    engine.end_payload(call, {"jsonrpc": "2.0", "id": 3, "result": {}})
