"""The span contract on a real client and agent from the SDK, connected in-process by a loopback stream."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from acp_app import (
    FILE_BODY,
    SECRET,
    SECRET_PATH,
    NoKwargsAgent,
    TraceAgent,
    TraceClient,
    initialize,
    open_session,
    prompt,
)
from opentelemetry import trace
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.trace import SpanKind, StatusCode
from spans import all_text, find, one, parent_of, span_id, trace_id, wait_until

C, S, P, N = SpanKind.CLIENT, SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CONSUMER


@pytest.fixture(autouse=True)
def _span_per_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-message span contract: pinned to ``notification_spans=all`` (the default is ``turn``)."""
    monkeypatch.setenv("OTEL_PYTHON_ACP_NOTIFICATION_SPANS", "all")


async def _turn(pair: Any, exporter: Any, text: str = "hello") -> tuple[Any, Any]:
    """One turn; returns once the agent's session/prompt span has ended too (up to SDK 0.12.0 it ends
    only after the response is on its way, so the caller may see the response first)."""
    p = await pair()
    session_id = await open_session(p.client_conn)
    try:
        return p, await prompt(p.client_conn, session_id, text)
    finally:
        await _spans_ended(exporter, "session/prompt", S)


async def _spans_ended(exporter: Any, name: str, kind: SpanKind, count: int = 1) -> None:
    await wait_until(lambda: len(find(exporter.get_finished_spans(), name, kind)) >= count, what=f"{kind} {name}")


async def test_full_turn_is_one_connected_trace(instrument: Any, exporter: Any, pair: Any) -> None:
    _, response = await _turn(pair, exporter)
    assert response.stop_reason == "end_turn"
    spans = exporter.get_finished_spans()
    client_prompt = one(spans, "session/prompt", C)
    server_prompt = one(spans, "session/prompt", S)
    # client request -> agent handler (remote parent)
    assert parent_of(server_prompt) == span_id(client_prompt)
    assert server_prompt.parent.is_remote
    assert client_prompt.parent is None  # nothing was current in the caller: a new root
    # the agent's tool call: a span under its turn; the permission request for it under the tool
    tool = one(spans, "execute_tool read", SpanKind.INTERNAL)
    assert parent_of(tool) == span_id(server_prompt)
    # agent handler -> agent's requests back to the client -> client handlers
    for method in ("session/request_permission", "fs/read_text_file", "_test.dev/echo"):
        out, inc = one(spans, method, C), one(spans, method, S)
        # the permission under the tool it names, the file read under the one tool call open
        expected = server_prompt if method == "_test.dev/echo" else tool
        assert parent_of(out) == span_id(expected), method
        assert parent_of(inc) == span_id(out), method
        assert inc.parent.is_remote
    # agent's notifications -> client consumers
    producers = find(spans, "session/update", P)
    consumers = find(spans, "session/update", N)
    assert len(producers) == len(consumers) == 4
    for producer in producers:
        under = tool if "acp.tool_call.id" in producer.attributes else server_prompt
        assert parent_of(producer) == span_id(under)
    assert {parent_of(c) for c in consumers} == {span_id(p) for p in producers}
    note_out, note_in = one(spans, "_test.dev/note", P), one(spans, "_test.dev/note", N)
    assert parent_of(note_in) == span_id(note_out)
    # one trace id for the whole turn
    turn = [s for s in spans if s.name not in ("initialize", "session/new")]
    assert len(turn) == 2 + 3 * 2 + 8 + 2 + 1
    assert {trace_id(s) for s in turn} == {trace_id(client_prompt)}
    assert all(s.status.status_code == StatusCode.UNSET for s in spans)


async def test_attributes(instrument: Any, exporter: Any, pair: Any) -> None:
    await _turn(pair, exporter)
    spans = [s for s in exporter.get_finished_spans() if s.kind != SpanKind.INTERNAL]  # not the tool span
    for span in spans:
        attrs = span.attributes
        assert attrs["rpc.system.name"] == "jsonrpc"
        # a v1 turn is named "{method} {agent name}"; every other span by its method
        turn = attrs["acp.method.name"] == "session/prompt"
        assert span.name == (f"session/prompt {attrs['gen_ai.agent.name']}" if turn else attrs["acp.method.name"])
        if span.kind in (C, S):
            assert isinstance(attrs["jsonrpc.request.id"], str)
        else:
            assert "jsonrpc.request.id" not in attrs
    init_client, init_server = one(spans, "initialize", C), one(spans, "initialize", S)
    for span in (init_client, init_server):
        a = span.attributes
        assert a["acp.protocol.version"] == 1
        assert (a["acp.client.name"], a["acp.client.version"]) == ("test-client", "1.0.0")
        assert (a["gen_ai.agent.name"], a["gen_ai.agent.version"]) == ("test-agent", "2.0.0")
        assert tuple(a["acp.client.capabilities.extensions"]) == ("test.dev/buffers",)
        assert tuple(a["acp.agent.capabilities.extensions"]) == ("test.dev/agentThing",)
    assert init_client.attributes["jsonrpc.request.id"] == "0"
    # initialize facts are kept per connection and set on its later spans, on both sides
    for span in spans:
        if span.name != "initialize":
            assert span.attributes["gen_ai.agent.name"] == "test-agent"
            assert span.attributes["acp.client.version"] == "1.0.0"
    new_session = one(spans, "session/new", C)
    assert new_session.attributes["gen_ai.conversation.id"] == "sess-1"
    # The session id on every span that knows it, under its GenAI name (one query finds a session's messages)
    for span in find(spans, "session/prompt") + find(spans, "fs/read_text_file") + find(spans, "session/update"):
        assert span.attributes["gen_ai.conversation.id"] == "sess-1"
        assert span.attributes["jsonrpc.protocol.version"] == "2.0"
    assert not [s.name for s in spans if {"acp.session.id", "acp.agent.name", "acp.agent.version"} & set(s.attributes)]
    assert one(spans, "session/prompt", C).attributes["acp.stop_reason"] == "end_turn"
    assert one(spans, "session/prompt", S).attributes["acp.stop_reason"] == "end_turn"
    kinds = [s.attributes["acp.session.update.kind"] for s in find(spans, "session/update", P)]
    assert sorted(kinds) == ["agent_message_chunk", "agent_message_chunk", "tool_call", "tool_call_update"]
    tool = [s.attributes for s in find(spans, "session/update", N) if "acp.tool_call.id" in s.attributes]
    assert sorted((a["acp.tool_call.id"], a["acp.tool_call.status"]) for a in tool) == [
        ("call-1", "completed"),
        ("call-1", "pending"),
    ]
    for span in find(spans, "_test.dev/echo") + find(spans, "_test.dev/note"):
        assert span.attributes["acp.method.extension"] is True
        assert span.attributes["acp.extension.namespace"] == "test.dev"
    assert "acp.method.extension" not in one(spans, "session/prompt", C).attributes


async def test_error_response_on_both_sides(instrument: Any, exporter: Any, pair: Any) -> None:
    from acp.exceptions import RequestError

    with pytest.raises(RequestError) as info:
        await _turn(pair, exporter, "rpcerror")
    assert info.value.code == -32602 and info.value.data == {"secret": SECRET}
    spans = exporter.get_finished_spans()
    for kind in (C, S):
        span = one(spans, "session/prompt", kind)
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == "Invalid params"
        assert span.attributes["rpc.response.status_code"] == "-32602"
        assert span.attributes["error.type"] == "-32602"
    assert SECRET not in all_text(spans)  # error data is content: off by default


async def test_handler_exception(instrument: Any, exporter: Any, pair: Any) -> None:
    from acp.exceptions import RequestError

    with pytest.raises(RequestError) as info:
        await _turn(pair, exporter, "fail")
    assert info.value.code == -32603
    spans = exporter.get_finished_spans()
    server = one(spans, "session/prompt", S)
    assert server.status.status_code == StatusCode.ERROR
    assert server.attributes["error.type"] == "ValueError"
    assert server.attributes["rpc.response.status_code"] == "-32603"
    client = one(spans, "session/prompt", C)
    assert client.attributes["error.type"] == "-32603"
    assert client.status.status_code == StatusCode.ERROR
    assert SECRET not in all_text(spans)


async def test_unknown_extension_request_is_32601_on_both_sides(instrument: Any, exporter: Any, pair: Any) -> None:
    _, response = await _turn(pair, exporter, "missing-ext")
    assert response.field_meta == {"code": -32601}  # the application saw the real error
    spans = exporter.get_finished_spans()
    for kind in (C, S):
        span = one(spans, "_test.dev/missing", kind)
        assert span.status.status_code == StatusCode.ERROR
        assert span.attributes["rpc.response.status_code"] == "-32601"
        assert span.attributes["acp.extension.namespace"] == "test.dev"


async def test_unknown_extension_notification_is_not_an_error(instrument: Any, exporter: Any, pair: Any) -> None:
    from acp.exceptions import RequestError

    class NoExtensionsAgent(TraceAgent):
        async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
            # What an agent without this extension does: the router's answer for an unknown method.
            raise RequestError.method_not_found(f"_{method}")

    p = await pair(agent=NoExtensionsAgent())
    await p.client_conn.ext_notification("other.org/unknown", {"x": 1})
    await _spans_ended(exporter, "_other.org/unknown", N)
    spans = exporter.get_finished_spans()
    consumer = one(spans, "_other.org/unknown", N)
    assert consumer.status.status_code == StatusCode.UNSET
    assert consumer.attributes["acp.extension.namespace"] == "other.org"
    assert parent_of(consumer) == span_id(one(spans, "_other.org/unknown", P))


async def test_unknown_standard_notification_is_an_error(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair()
    await p.client_conn._conn.send_notification("session/no_such_thing", {"sessionId": "s"})
    await _spans_ended(exporter, "session/no_such_thing", N)
    consumer = one(exporter.get_finished_spans(), "session/no_such_thing", N)
    assert consumer.status.status_code == StatusCode.ERROR
    assert consumer.attributes["error.type"] == "-32601"


async def test_caller_cancellation(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair()
    session_id = await open_session(p.client_conn)
    task = asyncio.create_task(prompt(p.client_conn, session_id, "slow"))
    await asyncio.wait_for(p.agent.waiting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    client = one(exporter.get_finished_spans(), "session/prompt", C)
    assert client.attributes["acp.cancelled"] is True
    assert client.status.status_code == StatusCode.UNSET
    # the agent's handler is still running; session/cancel ends the turn as the protocol says
    await p.client_conn.cancel(session_id=session_id)
    await _spans_ended(exporter, "session/prompt", S)
    await _spans_ended(exporter, "session/cancel", N)
    server = one(exporter.get_finished_spans(), "session/prompt", S)
    if "_cancel_incoming" in vars(type(p.client_conn._conn)):
        # 1.0.0rc3+: the cancelled caller sent $/cancel_request, which cancelled the handler task at once
        # (details in test_core_sdk_compat.py::test_caller_cancel_on_this_release)
        assert server.attributes["acp.cancelled"] is True
    else:
        assert server.attributes["acp.stop_reason"] == "cancelled"
    assert one(exporter.get_finished_spans(), "session/cancel", N).attributes["gen_ai.conversation.id"] == session_id


async def test_close_with_requests_pending(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair()
    session_id = await open_session(p.client_conn)
    task = asyncio.create_task(prompt(p.client_conn, session_id, "slow"))
    await asyncio.wait_for(p.agent.waiting.wait(), 5)
    await p.client_conn.close()
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(task, 5)
    client = one(exporter.get_finished_spans(), "session/prompt", C)
    assert client.status.status_code == StatusCode.ERROR
    assert client.attributes["error.type"] == "ConnectionError"
    # closing the agent side cancels its in-flight handler: its span ends too, marked cancelled
    await p.agent_conn.close()
    server = one(exporter.get_finished_spans(), "session/prompt", S)
    assert server.attributes["acp.cancelled"] is True


async def test_handler_without_kwargs_keeps_working(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair(agent=NoKwargsAgent())
    response = await initialize(p.client_conn)
    assert response.protocol_version == 1
    server = one(exporter.get_finished_spans(), "initialize", S)
    assert server.status.status_code == StatusCode.UNSET
    assert parent_of(server) == span_id(one(exporter.get_finished_spans(), "initialize", C))


async def test_caller_params_not_mutated_and_other_meta_kept(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair()
    wire: list[dict[str, Any]] = []
    p.agent_conn._conn.add_observer(lambda event: wire.append(event.message))
    params = {"value": 1, "_meta": {"zed.dev/debugMode": True, "nested": {"a": [1, 2]}}}
    before = copy.deepcopy(params)
    result = await p.client_conn.ext_method("test.dev/ping", params)
    assert params == before  # the caller's dict and its _meta are untouched
    # the handler saw the other _meta keys, and none of ours
    assert result["sawMeta"] == ["nested", "zed.dev/debugMode"]
    sent = next(m for m in wire if m.get("method") == "_test.dev/ping")
    meta = sent["params"]["_meta"]
    assert meta["zed.dev/debugMode"] is True and meta["nested"] == {"a": [1, 2]}
    client = one(exporter.get_finished_spans(), "_test.dev/ping", C)
    assert meta["traceparent"].startswith(f"00-{trace_id(client):032x}-{span_id(client):016x}-")
    assert set(sent["params"]) == {"value", "_meta"}  # nothing added at the root of params


async def test_params_none_and_non_objects(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair()
    wire: list[dict[str, Any]] = []
    p.agent_conn._conn.add_observer(lambda event: wire.append(event.message))
    raw = p.client_conn._conn
    await raw.send_notification("_test.dev/none", None)
    await raw.send_notification("_test.dev/list", [1, 2])
    await raw.send_notification("_test.dev/badmeta", {"_meta": "not-an-object"})
    await wait_until(lambda: sum("method" in m for m in wire) == 3, what="three notifications on the wire")
    by_method = {m["method"]: m.get("params") for m in wire if "method" in m}
    assert set(by_method["_test.dev/none"]) == {"_meta"} and "traceparent" in by_method["_test.dev/none"]["_meta"]
    assert by_method["_test.dev/list"] == [1, 2]
    assert by_method["_test.dev/badmeta"] == {"_meta": "not-an-object"}
    assert len(find(exporter.get_finished_spans(), "_test.dev/list", P)) == 1  # span still recorded


async def test_inherited_context_is_not_the_parent(instrument: Any, exporter: Any, provider: Any, pair: Any) -> None:
    """Handler tasks inherit the context of whoever built the connection: it must not become the parent."""
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("app-startup"):
        p = await pair()  # both connections (and their receive loops) are built under app-startup
    raw = p.agent_conn._conn
    # Sent with trace context (from outside app-startup): the consumer is the producer's child.
    await raw.send_notification("_test.dev/plain", {"_meta": {}})
    # Sent without trace context: the receiving span must be a new root.
    with suppress_instrumentation():
        await raw.send_notification("_test.dev/untraced", {"x": 1})
    await _spans_ended(exporter, "_test.dev/plain", N)
    await _spans_ended(exporter, "_test.dev/untraced", N)
    spans = exporter.get_finished_spans()
    startup = one(spans, "app-startup")
    plain = one(spans, "_test.dev/plain", N)
    assert parent_of(plain) == span_id(one(spans, "_test.dev/plain", P))
    consumer = one(spans, "_test.dev/untraced", N)
    assert consumer.parent is None
    assert trace_id(consumer) != trace_id(startup) and trace_id(plain) != trace_id(startup)


async def test_suppress_instrumentation(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair()
    wire: list[dict[str, Any]] = []
    p.agent_conn._conn.add_observer(lambda event: wire.append(event.message))
    with suppress_instrumentation():
        result = await p.client_conn.ext_method("test.dev/ping", {"_meta": {"k": 1}})
    assert result["sawMeta"] == ["k"]
    sent = next(m for m in wire if m.get("method") == "_test.dev/ping")
    assert sent["params"]["_meta"] == {"k": 1}  # no injection
    assert not find(exporter.get_finished_spans(), "_test.dev/ping", C)


async def test_excluded_methods_still_propagate(instrument: Any, exporter: Any, provider: Any, pair: Any) -> None:
    instrument(excluded_methods="fs/*,session/update")
    tracer = provider.get_tracer("test")
    client = TraceClient()
    original = client.read_text_file

    async def read_text_file(**kwargs: Any) -> Any:
        with tracer.start_as_current_span("client-reads-file"):
            return await original(**kwargs)

    client.read_text_file = read_text_file  # type: ignore[method-assign]
    await _turn(lambda: pair(client=client), exporter)
    spans = exporter.get_finished_spans()
    assert not find(spans, "fs/read_text_file") and not find(spans, "session/update")
    # context still crossed the excluded request: the client's own span is a child of the agent's tool call
    # the read serves (the one open)
    assert parent_of(one(spans, "client-reads-file")) == span_id(one(spans, "execute_tool read"))
    one(spans, "session/request_permission", S)


async def test_content_capture_off_by_default(instrument: Any, exporter: Any, pair: Any) -> None:
    await _turn(pair, exporter)
    text = all_text(exporter.get_finished_spans())
    for secret in (SECRET, FILE_BODY, SECRET_PATH, "Allow once", "hello"):
        assert secret not in text
    assert "acp.params" not in text and "acp.result" not in text


async def test_content_capture_on_is_truncated(instrument: Any, exporter: Any, pair: Any) -> None:
    instrument(capture_content=True, capture_content_max_length=4000)
    await _turn(pair, exporter)
    spans = exporter.get_finished_spans()
    text = all_text(spans)
    assert SECRET in text and FILE_BODY in text and SECRET_PATH in text
    read = one(spans, "fs/read_text_file", S)
    assert FILE_BODY in read.attributes["acp.result"]
    assert "traceparent" not in read.attributes["acp.params"]  # our keys are not content
    exporter.clear()
    instrument(capture_content=True, capture_content_max_length=12)
    await _turn(pair, exporter)
    spans = exporter.get_finished_spans()
    captured = [v for s in spans for k, v in s.attributes.items() if k in ("acp.params", "acp.result")]
    assert captured and all(len(v) <= 12 for v in captured)
    assert any(len(v) == 12 for v in captured)  # truncated to the limit, not shorter


async def test_content_capture_records_error_data(instrument: Any, exporter: Any, pair: Any) -> None:
    from acp.exceptions import RequestError

    instrument(capture_content=True)
    with pytest.raises(RequestError):
        await _turn(pair, exporter, "rpcerror")
    server = one(exporter.get_finished_spans(), "session/prompt", S)
    assert SECRET in server.attributes["acp.error.data"]


async def test_caller_context_is_the_parent(instrument: Any, exporter: Any, provider: Any, pair: Any) -> None:
    p = await pair()
    with trace.use_span(provider.get_tracer("test").start_span("editor-action"), end_on_exit=True):
        await initialize(p.client_conn)
    spans = exporter.get_finished_spans()
    assert parent_of(one(spans, "initialize", C)) == span_id(one(spans, "editor-action"))
