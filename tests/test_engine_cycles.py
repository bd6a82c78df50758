"""The engine leaves no reference cycles per message: calls and contexts are freed by reference counting.

A cycle between an incoming call and the context it stores made every traced message garbage that only
the cycle collector could free (the call, its context and the whole span), costing GC time per round trip.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from acp_otel._engine import Call, Engine
from acp_otel._settings import load_settings

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Peer:
    """Stands for one connection (any weak-referenceable object)."""


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    """Cyclic garbage made inside the test is kept in the returned list instead of being freed."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def _one_incoming_round(engine: Engine, peer: Peer, i: int, fail: bool) -> str | None:
    message = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "session/prompt",
        "params": {"sessionId": "s", "prompt": [], "_meta": {"traceparent": TP}},
    }
    call, _handler_message, context = engine.begin_incoming(peer, message, is_request=True)
    assert call is not None
    token = otel_context.attach(context)
    try:
        if fail:  # the handler raised: the engine finds its call through the context
            engine.note_handler_exception(ValueError("boom"))
    finally:
        otel_context.detach(token)
    failure = call.failure
    engine.end_payload(call, {"jsonrpc": "2.0", "id": i, "result": {"stopReason": "end_turn"}})
    return failure


def test_incoming_calls_leave_no_cyclic_garbage(saved_garbage: list[object]) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = Engine(provider.get_tracer("t"), load_settings({}))
    peer = Peer()
    failures = [_one_incoming_round(engine, peer, i, fail=i % 2 == 1) for i in range(20)]
    assert failures == [None, "ValueError"] * 10  # the handler's exception still reaches its call
    assert len(exporter.get_finished_spans()) == 20
    gc.collect()
    leaked = [type(o).__name__ for o in saved_garbage if isinstance(o, (Call, otel_context.Context))]
    assert leaked == []
