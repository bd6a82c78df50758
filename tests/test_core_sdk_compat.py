"""Per-release behaviour of the SDK adapter: which hooks it picks, and what each release does on cancel.

These run in every cell of the compatibility matrix (``nox -s matrix``), so each check is written to
hold on every supported ``agent-client-protocol`` release, branching on what the installed SDK *has*
(never on its version string), as the adapter itself does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import wrapt
from acp_app import initialize, open_session, prompt
from opentelemetry.trace import SpanKind, StatusCode
from spans import find, one, parent_of, span_id, wait_until

from acp_otel import AcpInstrumentor

C, S, P, N = SpanKind.CLIENT, SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CONSUMER


def _connection_class() -> Any:
    from acp.connection import Connection

    return Connection


def _is_wrapped(owner: Any, attr: str) -> bool:
    return isinstance(owner.__dict__.get(attr), wrapt.FunctionWrapper)


def _has_execute_request() -> bool:
    return "_execute_request" in _connection_class().__dict__


def _sends_cancel_request() -> bool:
    """1.0.0rc3 and later: a cancelled caller sends ``$/cancel_request`` and handlers run in their own task."""
    return "_cancel_incoming" in _connection_class().__dict__


def test_hooks_chosen_by_capability(instrument: Any) -> None:
    conn = _connection_class()
    for attr in ("__init__", "send_request", "send_notification", "_run_notification"):
        assert _is_wrapped(conn, attr), attr
    if _has_execute_request():  # 0.12.1+: the payload-returning hook; _run_request only sends
        assert _is_wrapped(conn, "_execute_request")
        assert not _is_wrapped(conn, "_run_request")
    else:  # up to 0.12.0: _run_request runs the handler and sends the response
        assert _is_wrapped(conn, "_run_request")
    from acp.task.sender import MessageSender

    # Up to 0.12.0 the response's send ends the SERVER span; later the payload-returning hook does.
    assert _is_wrapped(MessageSender, "send") is not _has_execute_request()
    # synchronous before 0.12.1 / synchronous from then on: never wrapped, so never made async by us
    assert not _is_wrapped(conn, "_process_message")
    assert not _is_wrapped(conn, "_handle_response")
    import acp.connection

    if "span_context" in vars(acp.connection):
        assert _is_wrapped(acp.connection, "span_context")


HOOKS = ("__init__", "send_request", "send_notification", "_run_notification")


def _originals() -> dict[str, Any]:
    """The patched attributes as they are now: the incoming request hook this release has, and the rest."""
    import acp.connection

    conn = _connection_class()
    names = [*HOOKS, "_execute_request" if _has_execute_request() else "_run_request"]
    found = {name: conn.__dict__[name] for name in names}
    found["span_context"] = acp.connection.__dict__["span_context"]
    return found


def _inner(wrapper: Any) -> Any:
    """What one of our wrappers wraps, never another wrapper: the original function (span_context's is
    wrapped as a staticmethod, see Patches.wrap)."""
    inner = wrapper.__wrapped__
    assert not isinstance(inner, wrapt.FunctionWrapper)
    return inner.__func__ if isinstance(inner, staticmethod) else inner


async def test_uninstrument_restores_everything(provider: Any, exporter: Any, pair: Any) -> None:
    before = _originals()
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        assert all(isinstance(wrapped, wrapt.FunctionWrapper) for wrapped in _originals().values())
    finally:
        instrumentor.uninstrument()
    after = _originals()
    assert all(after[name] is before[name] for name in before)
    p = await pair()
    await initialize(p.client_conn)
    assert exporter.get_finished_spans() == ()


async def test_cycles_never_stack_wrappers(provider: Any, exporter: Any, pair: Any) -> None:
    before = _originals()
    instrumentor = AcpInstrumentor()
    try:
        for _ in range(3):
            instrumentor.instrument(tracer_provider=provider)
            instrumentor.instrument(tracer_provider=provider)  # a second call is refused, not stacked
            wrapped = _originals()
            assert all(_inner(wrapped[name]) is before[name] for name in before)
            instrumentor.uninstrument()
        instrumentor.instrument(tracer_provider=provider)
        p = await pair()
        await initialize(p.client_conn)
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    spans = exporter.get_finished_spans()
    assert len(find(spans, "initialize", C)) == 1
    assert len(find(spans, "initialize", S)) == 1


async def test_connection_outlives_uninstrument(instrument: Any, exporter: Any, pair: Any) -> None:
    """Before 0.12.1 a connection keeps the bound hooks it was built with: after uninstrument they pass through."""
    p = await pair()
    instrumentor = instrument()
    instrumentor.uninstrument()
    session_id = await open_session(p.client_conn)
    response = await prompt(p.client_conn, session_id, "hello")
    assert response.stop_reason == "end_turn"
    assert exporter.get_finished_spans() == ()


async def test_rpc_error_and_handler_exception_on_every_release(instrument: Any, exporter: Any, pair: Any) -> None:
    """Up to 0.12.0 ``_run_request`` re-raises after sending the error; 0.12.1+ returns an error payload."""
    from acp.exceptions import RequestError

    p = await pair()
    session_id = await open_session(p.client_conn)
    for text, code, error_type in (("rpcerror", -32602, "-32602"), ("fail", -32603, "ValueError")):
        exporter.clear()
        with pytest.raises(RequestError) as info:
            await prompt(p.client_conn, session_id, text)
        assert info.value.code == code
        await wait_until(lambda: len(find(exporter.get_finished_spans(), "session/prompt")) == 2)
        spans = exporter.get_finished_spans()
        client, server = one(spans, "session/prompt", C), one(spans, "session/prompt", S)
        for span in (client, server):
            assert span.status.status_code == StatusCode.ERROR
            assert span.attributes["rpc.response.status_code"] == str(code)
        assert server.attributes["error.type"] == error_type
        assert parent_of(server) == span_id(client)


async def test_a_server_span_has_ended_when_its_response_is_sent(instrument: Any, exporter: Any, pair: Any) -> None:
    """A peer may end this process as soon as it reads a response (the SDK's example client terminates its agent at
    once): a request's SERVER span has ended by the time the response is written, answer or error, on every release.
    Up to 0.12.0 ``_run_request`` returns only after the write, so the response's send ends the span there."""
    from acp.exceptions import RequestError

    p = await pair()
    unended: list[str] = []

    def on_message(event: Any) -> None:
        message = event.message
        if event.direction.value != "outgoing" or "method" in message:
            return  # the SDK tells its observers after the write: only the agent's responses are of interest
        ended = {s.attributes.get("jsonrpc.request.id") for s in exporter.get_finished_spans() if s.kind == S}
        if str(message["id"]) not in ended:
            unended.append(f"response {message['id']} sent before its span ended")

    p.agent_conn._conn.add_observer(on_message)
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, "hello")
    with pytest.raises(RequestError):
        await prompt(p.client_conn, session_id, "rpcerror")
    with pytest.raises(RequestError):
        await prompt(p.client_conn, session_id, "fail")
    servers = find(exporter.get_finished_spans(), "session/prompt", S)
    assert len(servers) == 3 and len({parent_of(s) for s in servers}) == 3  # each ended once, under its caller
    assert unended == []


async def test_caller_cancel_on_this_release(instrument: Any, exporter: Any, pair: Any) -> None:
    """rc3+: ``$/cancel_request`` (no ``_meta``), the handler span ends cancelled, the reply is -32800.

    Earlier releases send nothing: the handler keeps running until ``session/cancel``.
    """
    p = await pair()
    to_agent: list[dict[str, Any]] = []
    to_client: list[dict[str, Any]] = []
    p.agent_conn._conn.add_observer(lambda e: to_agent.append(e.message) if e.direction.value == "incoming" else None)
    p.client_conn._conn.add_observer(lambda e: to_client.append(e.message) if e.direction.value == "incoming" else None)
    session_id = await open_session(p.client_conn)
    task = asyncio.create_task(prompt(p.client_conn, session_id, "slow"))
    await wait_until(lambda: any(m.get("method") == "session/prompt" for m in to_agent))
    request_id = next(m["id"] for m in to_agent if m.get("method") == "session/prompt")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    client = one(exporter.get_finished_spans(), "session/prompt", C)
    assert client.attributes["acp.cancelled"] is True
    assert client.status.status_code == StatusCode.UNSET

    if not _sends_cancel_request():
        await p.client_conn.ext_notification("test.dev/note", {})  # the stream is ordered: a cancel would precede it
        await wait_until(lambda: any(m.get("method") == "_test.dev/note" for m in to_agent))
        assert not any(m.get("method") == "$/cancel_request" for m in to_agent)
        assert not find(exporter.get_finished_spans(), "session/prompt", S)  # still running
        await p.client_conn.cancel(session_id=session_id)
        await wait_until(lambda: bool(find(exporter.get_finished_spans(), "session/prompt", S)))
        return

    # the notification the SDK sends for us: traced as a PRODUCER span, its params left exactly as is
    await wait_until(lambda: bool(find(exporter.get_finished_spans(), "$/cancel_request", P)))
    producer = one(exporter.get_finished_spans(), "$/cancel_request", P)
    assert parent_of(producer) == parent_of(client)  # sent for the caller, in the caller's context
    await wait_until(lambda: any(m.get("method") == "$/cancel_request" for m in to_agent))
    wire = next(m for m in to_agent if m.get("method") == "$/cancel_request")
    assert wire["params"] == {"requestId": request_id}  # no _meta injected into a protocol method
    # handled inside the SDK's dispatcher, never by a handler: no CONSUMER span
    assert not find(exporter.get_finished_spans(), "$/cancel_request", N)

    # agent side: the handler task was cancelled, its SERVER span ends cancelled, not as an error
    await wait_until(lambda: bool(find(exporter.get_finished_spans(), "session/prompt", S)))
    server = one(exporter.get_finished_spans(), "session/prompt", S)
    assert server.attributes["acp.cancelled"] is True
    assert server.status.status_code == StatusCode.UNSET
    assert parent_of(server) == span_id(client)
    # and the caller's side got the -32800 reply (dropped by the SDK: nobody waits for it any more)
    await wait_until(lambda: any(m.get("id") == request_id and "error" in m for m in to_client))
    reply = next(m for m in to_client if m.get("id") == request_id and "error" in m)
    assert reply["error"]["code"] == -32800
    # the connection is still usable afterwards, and still traced
    exporter.clear()
    await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])
    assert len(find(exporter.get_finished_spans(), "session/new")) == 2


async def test_agent_side_connection_stream_check_untouched(instrument: Any) -> None:
    """0.8/0.9 ``AgentSideConnection`` type-checks its streams itself; instrumenting must not change that."""
    import inspect

    from acp import AgentSideConnection

    source = inspect.getsource(AgentSideConnection.__init__)
    if "StreamWriter" not in source:
        pytest.skip("this release accepts transports as well as streams")
    with pytest.raises(TypeError):
        AgentSideConnection(lambda conn: object(), object(), object())
