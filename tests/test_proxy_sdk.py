"""The Python SDK's client as the editor, through a real ``acp-otel proxy`` process, to real agents.

Agents: the TypeScript SDK's (node, ``@agentclientprotocol/sdk`` installed from tests/ts_agent's lock
file), an untraced Python SDK agent, and a Python SDK agent traced with acp-otel. The proxy's spans
arrive over OTLP/HTTP at a loopback receiver; the editor's (when traced) at an in-memory exporter.
"""

from __future__ import annotations

from typing import Any

import pytest
from acp_app import FILE_BODY, initialize, open_session, prompt
from harness import PY_AGENT, base_env, proxied_client, ts_agent_command
from otlp_sink import OtlpSink, Span

pytestmark = pytest.mark.e2e


@pytest.fixture
def sink() -> Any:
    with OtlpSink() as s:
        yield s


def named(spans: list[Span], name: str, kind: str, service: str) -> list[Span]:
    # a method name also finds its "{method} {target}" spans (a v1 turn is named after its agent)
    return [
        s
        for s in spans
        if name in (s.name, s.attributes.get("acp.method.name")) and s.kind == kind and s.service == service
    ]


def the(spans: list[Span], name: str, kind: str, service: str) -> Span:
    found = named(spans, name, kind, service)
    assert len(found) == 1, (name, kind, service, [(s.service, s.name, s.kind) for s in spans])
    return found[0]


def has(name: str, kind: str, service: str, count: int = 1) -> Any:
    return lambda spans: len(named(spans, name, kind, service)) >= count


async def test_typescript_agent_untraced_editor(sink: OtlpSink) -> None:
    """Editor untraced -> proxy -> TypeScript SDK agent: the turn works and the proxy records both sides."""
    env = base_env(**sink.env())
    # --flush-timeout: nothing on stderr even when a loaded machine slows the final export down.
    async with proxied_client(ts_agent_command(), env, ["--notification-spans", "all", "--flush-timeout", "10"]) as run:
        init = await initialize(run.conn)
        session = await run.conn.new_session(cwd="/tmp", mcp_servers=[])
        result = await prompt(run.conn, session.session_id, "hello")
    assert init.agent_info is not None and init.agent_info.name == "ts-test-agent"
    assert result.stop_reason == "end_turn"  # the permission round trip went through the proxy both ways
    kinds = [getattr(u, "session_update", None) for u in run.client.updates]
    assert kinds == ["agent_message_chunk", "tool_call", "tool_call_update"]
    assert run.returncode == 0 and run.stderr == ""
    spans = sink.wait_for(has("session/update", "PRODUCER", "agent-proxy", 3))
    turn = the(spans, "session/prompt", "CLIENT", "agent-proxy")  # the proxy: `node agent.mjs` + "-proxy"
    assert turn.parent_id is None and turn.status == "UNSET"
    assert turn.attributes["acp.stop_reason"] == "end_turn"
    assert turn.attributes["gen_ai.conversation.id"] == session.session_id
    assert turn.attributes["gen_ai.agent.name"] == "ts-test-agent"
    init_span = the(spans, "initialize", "CLIENT", "agent-proxy")
    assert init_span.attributes["acp.client.name"] == "test-client"
    permission = the(spans, "session/request_permission", "CLIENT", "agent-proxy")
    assert permission.status == "UNSET" and permission.attributes["jsonrpc.request.id"] == "0"
    updates = named(spans, "session/update", "PRODUCER", "agent-proxy")
    assert sorted(u.attributes["acp.session.update.kind"] for u in updates) == [
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
    ]
    # Content stays out unless asked for.
    assert not any("Hello from TypeScript" in repr(s.attributes) for s in spans)
    # The agent sent no trace context: the proxy makes the tool span.
    (tool,) = [s for s in spans if s.name.startswith("execute_tool")]
    assert tool.attributes["gen_ai.tool.call.id"] == "ts-call-1"
    assert permission.parent_id == tool.span_id  # the permission request sits under its tool call


async def test_typescript_agent_error_and_traced_editor(sink: OtlpSink, instrument: Any, exporter: Any) -> None:
    """Editor traced -> proxy -> TypeScript agent: the proxy's span is the editor span's child, errors are named."""
    env = base_env(**sink.env())
    async with proxied_client(ts_agent_command(), env, ["--service-name", "my-proxy"]) as run:
        session_id = await open_session(run.conn)
        with pytest.raises(Exception) as failed:
            await prompt(run.conn, session_id, "please fail")
    assert getattr(failed.value, "code", None) == -32602
    spans = sink.wait_for(has("session/prompt", "CLIENT", "my-proxy"))
    proxy_turn = the(spans, "session/prompt", "CLIENT", "my-proxy")
    editor_turn = next(
        s for s in exporter.get_finished_spans() if s.attributes.get("acp.method.name") == "session/prompt"
    )
    ctx = editor_turn.get_span_context()
    assert proxy_turn.trace_id == format(ctx.trace_id, "032x")
    assert proxy_turn.parent_id == format(ctx.span_id, "016x")
    assert proxy_turn.status == "ERROR"
    assert proxy_turn.attributes["rpc.response.status_code"] == "-32602"
    assert proxy_turn.attributes["error.type"] == "-32602"


async def test_untraced_python_agent_full_turn(sink: OtlpSink) -> None:
    """Untraced editor -> proxy -> untraced Python SDK agent: every callback of the turn relayed and traced."""
    env = base_env(**sink.env())
    async with proxied_client([*PY_AGENT, "trace"], env) as run:
        session_id = await open_session(run.conn)
        result = await prompt(run.conn, session_id, "hello")
    assert result.stop_reason == "end_turn"  # the agent checked the file body, permission and ext answers
    assert run.client.ext_params and run.client.ext_params[0]["value"] == 42
    assert run.returncode == 0
    spans = sink.wait_for(has("_test.dev/note", "PRODUCER", "trace_agent-proxy"))
    turn = the(spans, "session/prompt", "CLIENT", "trace_agent-proxy")
    for name in ("fs/read_text_file", "session/request_permission", "_test.dev/echo"):
        span = the(spans, name, "CLIENT", "trace_agent-proxy")
        assert span.status == "UNSET"
        if name != "_test.dev/echo":
            # An untraced agent's session-scoped calls go into its turn.
            assert span.trace_id == turn.trace_id and span.parent_id is not None
        else:  # the agent sent no context (and the extension call names no session): a new root
            assert span.parent_id is None
    echo = the(spans, "_test.dev/echo", "CLIENT", "trace_agent-proxy")
    assert echo.attributes["acp.extension.namespace"] == "test.dev"
    assert not any(FILE_BODY in repr(s.attributes) for s in spans)


async def test_traced_agent_one_trace_editor_proxy_agent(sink: OtlpSink, instrument: Any, exporter: Any) -> None:
    """Traced editor -> proxy -> agent traced with acp-otel: one trace, each hop the child of the previous one."""
    env = base_env(**sink.env(), ACP_OTEL_TEST_SPANS="otlp")
    async with proxied_client(sink.for_agent(*PY_AGENT, "trace"), env, ["--service-name", "proxy"]) as run:
        session_id = await open_session(run.conn)
        result = await prompt(run.conn, session_id, "hello")
    assert result.stop_reason == "end_turn"
    spans = sink.wait_for(
        lambda s: has("session/prompt", "SERVER", "test-agent")(s) and has("session/prompt", "CLIENT", "proxy")(s)
    )
    editor = {
        s.attributes.get("acp.method.name", s.name): s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"
    }
    editor_turn = editor["session/prompt"].get_span_context()
    proxy_turn = the(spans, "session/prompt", "CLIENT", "proxy")
    agent_turn = the(spans, "session/prompt", "SERVER", "test-agent")
    trace_id = format(editor_turn.trace_id, "032x")
    assert proxy_turn.trace_id == agent_turn.trace_id == trace_id
    assert proxy_turn.parent_id == format(editor_turn.span_id, "016x")
    assert agent_turn.parent_id == proxy_turn.span_id
    # The agent's callback: agent CLIENT -> proxy CLIENT (standing for the agent) -> editor SERVER.
    agent_ask = the(spans, "session/request_permission", "CLIENT", "test-agent")
    proxy_ask = the(spans, "session/request_permission", "CLIENT", "proxy")
    editor_ask = next(
        s for s in exporter.get_finished_spans() if s.name == "session/request_permission" and s.kind.name == "SERVER"
    )
    assert proxy_ask.parent_id == agent_ask.span_id and proxy_ask.trace_id == trace_id
    assert format(editor_ask.parent.span_id, "016x") == proxy_ask.span_id
    # The agent's handlers got no trace keys as keyword arguments (its initialize saw none).
    assert run.returncode == 0


async def test_untraced_editor_and_agent_context_still_joins(sink: OtlpSink) -> None:
    """Untraced editor, traced agent: the agent's SERVER spans hang off the proxy's CLIENT spans."""
    env = base_env(**sink.env(), ACP_OTEL_TEST_SPANS="otlp")
    # --flush-timeout: the proxy's spans exported at exit even when a loaded machine slows the export down.
    args = ["--service-name", "proxy", "--flush-timeout", "10"]
    async with proxied_client(sink.for_agent(*PY_AGENT, "trace"), env, args) as run:
        await open_session(run.conn)
    assert run.returncode == 0, run.stderr
    both = (has("session/new", "SERVER", "test-agent"), has("session/new", "CLIENT", "proxy"))
    spans = sink.wait_for(lambda got: all(arrived(got) for arrived in both))
    proxy_new = the(spans, "session/new", "CLIENT", "proxy")
    agent_new = the(spans, "session/new", "SERVER", "test-agent")
    assert proxy_new.parent_id is None
    assert agent_new.parent_id == proxy_new.span_id and agent_new.trace_id == proxy_new.trace_id
