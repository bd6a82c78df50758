"""Tool calls on a real SDK client and agent: a permission asked before the tool call is announced, tool
names from each source (ACP ``name``, known agents' ``_meta``, titles when asked, the kind) and a name that
arrives late, ``fs/*`` / ``terminal/*`` requests under the tool call they serve, extra trace-context keys.

In process (one engine for both sides, so the agent is traced and makes the tool spans) and with the agent
as an untraced process (the editor's own turn and tool logic decides).
"""

from __future__ import annotations

from typing import Any

import pytest
from acp_app import SECRET, TERMINAL_ID, TOOL_SCRIPTS, ToolAgent, TraceAgent, TraceClient, open_session, prompt
from agent_process import agent_process
from opentelemetry.trace import SpanKind
from spans import all_text, parent_of, span_id, wait_spans_closed

from acp_otel._settings import load_settings

C, S, INTERNAL = SpanKind.CLIENT, SpanKind.SERVER, SpanKind.INTERNAL
DECISION_S = 0.2  # how long the "user" takes to grant a permission


def _tools(spans: Any) -> dict[str, Any]:
    tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    by_id = {s.attributes["gen_ai.tool.call.id"]: s for s in tools}
    assert len(by_id) == len(tools), [s.name for s in tools]  # one span per tool call
    return by_id


def _turn(spans: Any, kind: SpanKind) -> Any:
    (turn,) = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent" and s.kind == kind]
    return turn


def _requests(spans: Any, kind: SpanKind) -> list[Any]:
    """The fs/* and terminal/* spans of one side, in the order they started."""
    found = [s for s in spans if s.name.startswith(("fs/", "terminal/")) and s.kind == kind]
    return sorted(found, key=lambda s: s.start_time)


def _inside(child: Any, parent: Any) -> bool:
    return parent.start_time <= child.start_time and child.end_time <= parent.end_time


async def _in_process(pair: Any, counter: Any, agent: Any, text: str, client: Any = None) -> Any:
    p = await pair(agent, client or TraceClient())
    session_id = await open_session(p.client_conn)
    response = await prompt(p.client_conn, session_id, text)
    await wait_spans_closed(counter)
    assert not counter.open, counter.open
    return response


def _tool_call(tool_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": tool_id, "status": "pending", **fields}


def _update(tool_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": tool_id, **fields}


def _done(*tool_ids: str) -> list[dict[str, Any]]:
    return [_update(t, status="completed") for t in tool_ids]


# ------------------------------------------------------------------ permission before the tool call


async def test_permission_first_opens_the_tool_call_traced_agent(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    """Codex's order (permission, then tool_call, then completed): the agent's tool span opens at the permission,
    which is its child, and the client's handling of it (the user's decision) lies inside the tool span."""
    client = TraceClient()
    client.permission_delay = DECISION_S
    # A second permission for the tool call once it finished opens nothing: it goes under the turn.
    again = ("permission", {"toolCallId": "call_3", "status": "pending", "title": "again"})
    await _in_process(pair, counter, ToolAgent([*TOOL_SCRIPTS["codex"], again]), "x", client)
    spans = exporter.get_finished_spans()
    (tool,) = _tools(spans).values()
    assert tool.name == "execute_tool execute" and tool.attributes["gen_ai.tool.call.id"] == "call_3"
    assert parent_of(tool) == span_id(_turn(spans, S))
    assert [e.attributes["acp.tool_call.status"] for e in tool.events] == ["pending", "in_progress", "completed"]
    assert "acp.tool_call.ended_by" not in tool.attributes
    ask, ask_again = sorted(
        (s for s in spans if s.name == "session/request_permission" and s.kind == C), key=lambda s: s.start_time
    )
    decide = next(s for s in spans if s.name == "session/request_permission" and s.kind == S)
    assert parent_of(ask) == span_id(tool) and parent_of(decide) == span_id(ask)
    assert _inside(decide, tool) and (decide.end_time - decide.start_time) / 1e9 >= DECISION_S
    assert parent_of(ask_again) == span_id(_turn(spans, S))


async def test_permission_first_untraced_agent_the_editor_opens_the_tool_call(
    instrument: Any, exporter: Any, counter: Any
) -> None:
    """The same with the agent an untraced process: the editor makes the tool span, at the permission request,
    and its handling of the request (the decision time) is the tool span's child."""
    client = TraceClient()
    client.permission_delay = DECISION_S
    async with agent_process("tools", client=client) as agent:
        session_id = await open_session(agent.conn)
        await prompt(agent.conn, session_id, "codex")
    await wait_spans_closed(counter)
    spans = exporter.get_finished_spans()
    (tool,) = _tools(spans).values()
    assert parent_of(tool) == span_id(_turn(spans, C))
    decide = next(s for s in spans if s.name == "session/request_permission")
    assert decide.kind == S and parent_of(decide) == span_id(tool) and _inside(decide, tool)
    assert (decide.end_time - decide.start_time) / 1e9 >= DECISION_S
    assert tool.attributes["acp.tool_call.kind"] == "execute"
    # Opened at the permission (pending). Before 0.12 the client's prompt() may return before the handlers of the
    # last updates ran: the turn, and the tool span with it, can end before the client saw "in_progress".
    assert tool.events[0].attributes["acp.tool_call.status"] == "pending"


async def test_permission_first_follows_the_tool_spans_option(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    """A side that makes no tool spans opens none at a permission either: the permission stays under the turn."""
    for mode in ("never", "always"):
        instrument(tool_spans=mode)
        exporter.clear()
        await _in_process(pair, counter, ToolAgent(), "codex")
        spans = exporter.get_finished_spans()
        ask = next(s for s in spans if s.name == "session/request_permission" and s.kind == C)
        tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
        if mode == "never":
            assert not tools and parent_of(ask) == span_id(_turn(spans, S))
        else:  # both sides make one, each opened at the permission it sends or receives
            agent_tool = next(t for t in tools if parent_of(t) == span_id(_turn(spans, S)))
            assert len(tools) == 2 and parent_of(ask) == span_id(agent_tool)
            decide = next(s for s in spans if s.name == "session/request_permission" and s.kind == S)
            assert all(t.start_time <= decide.start_time for t in tools)


# ------------------------------------------------------------------ tool names


async def test_tool_name_sources_and_precedence(instrument: Any, exporter: Any, pair: Any, counter: Any) -> None:
    meta_both = {"claudeCode": {"toolName": "Read"}, "toolName": "read_file"}
    script = [
        _tool_call("acp", name="acp_name", _meta=meta_both, kind="read", title="Title"),  # ACP's name first
        _tool_call("claude", _meta=meta_both, kind="read", title="Read File"),  # then Claude Code's _meta
        _tool_call("qwen", _meta={"toolName": "run_shell_command"}, kind="execute"),  # Qwen Code's
        _tool_call("kind", kind="edit", title="WriteFile"),  # then the kind (titles only when asked)
        _tool_call("none", title="ReadFile"),  # nothing names it
        _tool_call("hostile", name=7, _meta={"claudeCode": "x", "toolName": ["y"]}, kind="fetch"),
        *_done("acp", "claude", "qwen", "kind", "none", "hostile"),
    ]
    await _in_process(pair, counter, ToolAgent(script), "x")
    tools = _tools(exporter.get_finished_spans())
    names = {tool_id: span.name for tool_id, span in tools.items()}
    assert names == {
        "acp": "execute_tool acp_name",
        "claude": "execute_tool Read",
        "qwen": "execute_tool run_shell_command",
        "kind": "execute_tool edit",
        "none": "execute_tool",
        "hostile": "execute_tool fetch",
    }
    for tool_id, span in tools.items():
        if tool_id == "none":
            assert "gen_ai.tool.name" not in span.attributes
        else:
            assert span.name == f"execute_tool {span.attributes['gen_ai.tool.name']}"
    assert tools["claude"].attributes["acp.tool_call.kind"] == "read"  # the kind is kept beside the name
    # Where each name came from: a kind standing in for a name says so.
    sources = {tool_id: span.attributes.get("acp.tool_call.name.source") for tool_id, span in tools.items()}
    assert sources == {
        "acp": "acp",
        "claude": "agent_meta",
        "qwen": "agent_meta",
        "kind": "kind",
        "none": None,
        "hostile": "kind",
    }


async def test_a_name_that_arrives_late_renames_the_open_span(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    script = [
        # Claude Code: tool_call pending with a generic title, its name in a later update's _meta.
        _tool_call("cc", kind="read", title="Read File"),
        _update("cc", _meta={"claudeCode": {"toolName": "Read"}}, title=f"Read {SECRET}", rawInput={"p": SECRET}),
        _update("cc", _meta={"toolName": "other_name"}),  # a source of the same rank: the first name stays
        # Nothing names it at first; its kind arrives later, then changes: the name follows the kind.
        _tool_call("late-kind"),
        _update("late-kind", kind="fetch"),
        _update("late-kind", kind="search"),
        # An ACP name beats a _meta name that came first.
        _tool_call("upgrade", _meta={"toolName": "from_meta"}, kind="read"),
        _update("upgrade", name="from_acp", kind="edit"),  # the kind changes, the better name stays
        *_done("cc", "late-kind", "upgrade"),
    ]
    await _in_process(pair, counter, ToolAgent(script), "x")
    spans = exporter.get_finished_spans()
    tools = _tools(spans)
    assert tools["cc"].name == "execute_tool Read" and tools["cc"].attributes["gen_ai.tool.name"] == "Read"
    assert tools["late-kind"].name == "execute_tool search"
    assert tools["late-kind"].attributes["gen_ai.tool.name"] == "search"
    assert tools["late-kind"].attributes["acp.tool_call.name.source"] == "kind"
    assert tools["cc"].attributes["acp.tool_call.name.source"] == "agent_meta"  # renamed: the source follows
    assert tools["upgrade"].attributes["acp.tool_call.name.source"] == "acp"
    assert tools["upgrade"].name == "execute_tool from_acp"
    assert tools["upgrade"].attributes["acp.tool_call.kind"] == "edit"
    assert SECRET not in all_text(spans)


@pytest.mark.parametrize("titles", [False, True])
async def test_tool_names_from_titles_option(
    instrument: Any, exporter: Any, pair: Any, counter: Any, titles: bool
) -> None:
    instrument(tool_names_from_titles=titles)
    script = [
        *TOOL_SCRIPTS["kimi"],  # ReadFile then "ReadFile: notes.txt"; Shell then "Shell: ls"
        _tool_call("args-first", title="Grep: TODO"),  # the first title has arguments: its leading identifier
        _tool_call("spaced", title="cat notes.txt"),  # not an identifier alone or before ':': nothing
        _update("spaced", title="notes.txt"),  # nor a later title (here a file name)
        _tool_call("long", title="x" * 65),  # longer than 64 characters: nothing
        _tool_call("later-title"),  # the first title may come with a later update
        _update("later-title", title="Glob"),
        _update("later-title", title="Other"),  # only the first title counts
        _tool_call("meta", _meta={"toolName": "write_file"}, title="WriteFile"),  # a declared name wins
        _tool_call("kind-too", kind="read", title="ReadMany"),  # the title before the kind
        *_done("args-first", "spaced", "long", "later-title", "meta", "kind-too"),
    ]
    await _in_process(pair, counter, ToolAgent(script), "x")
    spans = exporter.get_finished_spans()
    names = {tool_id: span.attributes.get("gen_ai.tool.name") for tool_id, span in _tools(spans).items()}
    if titles:
        assert names == {
            "k/call_1": "ReadFile",
            "k/call_2": "Shell",
            "args-first": "Grep",
            "spaced": None,
            "long": None,
            "later-title": "Glob",
            "meta": "write_file",
            "kind-too": "ReadMany",
        }
        sources = {tool_id: span.attributes.get("acp.tool_call.name.source") for tool_id, span in _tools(spans).items()}
        assert sources["k/call_1"] == sources["kind-too"] == "title" and sources["meta"] == "agent_meta"
    else:
        assert names == {
            "k/call_1": None,
            "k/call_2": None,
            "args-first": None,
            "spaced": None,
            "long": None,
            "later-title": None,
            "meta": "write_file",
            "kind-too": "read",
        }
    text = all_text(spans)
    # Never a title with its arguments, and without the option no title at all.
    for title in ("ReadFile: notes.txt", "Shell: ls", "Grep: TODO", "cat notes.txt", "notes.txt"):
        assert title not in text
    if not titles:
        for title in ("ReadFile", "Shell", "Glob", "Grep", "ReadMany"):
            assert title not in text


# ------------------------------------------------------------------ fs/* and terminal/* requests


def _expect_kimi(requests: list[Any], tools: dict[str, Any]) -> None:
    methods = [s.name for s in requests]
    assert methods == [
        "fs/read_text_file",
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
    ]
    assert parent_of(requests[0]) == span_id(tools["k/call_1"])  # the one tool call in progress
    for request in requests[1:]:  # create: the one in progress; then by the terminal its content embeds
        assert parent_of(request) == span_id(tools["k/call_2"]), request.name


def _expect_two_open(requests: list[Any], tools: dict[str, Any], turn: Any) -> None:
    expected = [
        ("terminal/create", turn),  # two open, no terminal known
        ("terminal/output", tools["a"]),  # its terminalId was embedded in a's content
        ("fs/read_text_file", turn),  # two open
        ("fs/write_text_file", tools["a"]),  # one open
        ("terminal/release", turn),  # its tool call has ended (c, open alone now, does not get it)
    ]
    assert [s.name for s in requests] == [name for name, _ in expected]
    for request, (name, parent) in zip(requests, expected, strict=True):
        assert parent_of(request) == span_id(parent), name


async def test_fs_and_terminal_requests_under_the_tool_call_they_serve_traced_agent(
    instrument: Any, exporter: Any, provider: Any, pair: Any, counter: Any
) -> None:
    """The agent's CLIENT spans hang from its tool spans; the editor's SERVER spans from those (propagated).
    A request made under a span the agent opened itself stays under that span."""
    tracer = provider.get_tracer("agent-app")

    class OwnSpanAgent(TraceAgent):
        async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
            raw = self.conn._conn
            update = {"sessionId": session_id, "update": _tool_call("t", kind="read", title="t")}
            await raw.send_notification("session/update", update)
            await raw.send_request("fs/read_text_file", {"sessionId": session_id, "path": "/x"})
            with tracer.start_as_current_span("my-read"):
                await raw.send_request("fs/read_text_file", {"sessionId": session_id, "path": "/x"})
            update = {"sessionId": session_id, "update": _update("t", status="completed")}
            await raw.send_notification("session/update", update)
            return {"stopReason": "end_turn"}

    await _in_process(pair, counter, OwnSpanAgent(), "x")
    spans = exporter.get_finished_spans()
    plain, under_own = _requests(spans, C)
    assert parent_of(plain) == span_id(_tools(spans)["t"])
    assert parent_of(under_own) == span_id(next(s for s in spans if s.name == "my-read"))
    for script in ("kimi", "two-open"):
        exporter.clear()
        await _in_process(pair, counter, ToolAgent(), script)
        spans = exporter.get_finished_spans()
        tools, turn = _tools(spans), _turn(spans, S)
        requests = _requests(spans, C)
        if script == "kimi":
            _expect_kimi(requests, tools)
        else:
            _expect_two_open(requests, tools, turn)
        served = _requests(spans, S)
        assert [parent_of(s) for s in served] == [span_id(r) for r in requests]


async def test_a_terminal_named_where_a_permission_request_opens_the_tool_call_serves_it(
    instrument: Any, exporter: Any, pair: Any, counter: Any
) -> None:
    """A tool call first seen in a permission request whose ``toolCall`` embeds a terminal: a request naming
    that terminal goes under that tool call, though another one is open."""
    terminal = {"type": "terminal", "terminalId": TERMINAL_ID}
    script = [
        (
            "permission",
            {"toolCallId": "a", "status": "pending", "kind": "execute", "title": "x", "content": [terminal]},
        ),
        _tool_call("b", status="in_progress", kind="read", title="y"),
        ("request", "terminal/output", {"terminalId": TERMINAL_ID}),
        _update("a", status="completed"),
        _update("b", status="completed"),
    ]
    await _in_process(pair, counter, ToolAgent(script), "x")
    spans = exporter.get_finished_spans()
    (request,) = _requests(spans, C)
    assert request.name == "terminal/output" and parent_of(request) == span_id(_tools(spans)["a"])


async def test_fs_and_terminal_requests_untraced_agent_the_editor_links_them(
    instrument: Any, exporter: Any, counter: Any
) -> None:
    """The agent is an untraced process: the editor's SERVER spans follow the editor's own tool spans."""
    for script in ("kimi", "two-open"):
        exporter.clear()
        async with agent_process("tools") as agent:
            session_id = await open_session(agent.conn)
            await prompt(agent.conn, session_id, script)
        await wait_spans_closed(counter)
        spans = exporter.get_finished_spans()
        tools, turn = _tools(spans), _turn(spans, C)
        requests = _requests(spans, S)
        assert not _requests(spans, C)
        if script == "kimi":
            _expect_kimi(requests, tools)
        else:
            _expect_two_open(requests, tools, turn)


# ------------------------------------------------------------------ extra trace-context keys


def test_extra_trace_keys_setting() -> None:
    settings = load_settings({"extra_trace_keys": " qwen ,acme.traceparent,, traceparent,bad-key,QWEN"})
    assert settings.extra_trace_keys == ("qwen.telemetry.traceparent", "qwen.telemetry.tracestate", "acme.traceparent")
    from_env = load_settings(environ={"OTEL_PYTHON_ACP_EXTRA_TRACE_KEYS": "x.tracestate"})
    assert from_env.extra_trace_keys == ("x.tracestate",)
    assert load_settings(environ={}).extra_trace_keys == ()
    assert load_settings({"extra_trace_keys": ["qwen"]}).extra_trace_keys[0] == "qwen.telemetry.traceparent"
    assert load_settings({"extra_trace_keys": 5}).extra_trace_keys == ()
    assert load_settings(environ={"OTEL_PYTHON_ACP_TOOL_NAMES_FROM_TITLES": "true"}).tool_names_from_titles == "prefix"
    assert load_settings(environ={}).tool_names_from_titles == "auto"  # the agent profile says


async def test_extra_trace_keys_in_process(instrument: Any, exporter: Any, pair: Any) -> None:
    """Written beside the reserved keys; a receiver traced with the same setting strips them before its handlers."""
    instrument(extra_trace_keys="qwen,acme.traceparent")
    p = await pair(TraceAgent(), TraceClient())
    wire: list[dict[str, Any]] = []
    p.agent_conn._conn.add_observer(lambda event: wire.append(event.message))
    session_id = await open_session(p.client_conn)
    response = await prompt(p.client_conn, session_id, "echo-meta")
    sent = next(m for m in wire if m.get("method") == "session/prompt")
    meta = sent["params"]["_meta"]
    assert meta["qwen.telemetry.traceparent"] == meta["acme.traceparent"] == meta["traceparent"]
    assert "qwen.telemetry.tracestate" not in meta  # no tracestate to copy
    client_turn = next(
        s for s in exporter.get_finished_spans() if s.name.partition(" ")[0] == "session/prompt" and s.kind == C
    )
    assert meta["traceparent"].split("-")[2] == format(span_id(client_turn), "016x")
    assert response.field_meta == {"kwargs": {}}  # the agent's handler got none of them


async def test_extra_trace_keys_reach_an_untraced_agent(instrument: Any) -> None:
    """An agent that reads its own keys (as Qwen Code does) gets them only when asked; the reserved key always."""
    for extra in (None, "qwen"):
        if extra is not None:
            instrument(extra_trace_keys=extra)
        async with agent_process("trace") as agent:
            session_id = await open_session(agent.conn)
            response = await prompt(agent.conn, session_id, "echo-meta")
        seen = response.field_meta["kwargs"]
        if extra is None:
            assert sorted(seen) == ["traceparent"]
        else:
            assert sorted(seen) == ["qwen.telemetry.traceparent", "traceparent"]
            assert seen["qwen.telemetry.traceparent"] == seen["traceparent"]
