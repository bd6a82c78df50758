"""Agent profiles on the real SDK: each verified agent's messages (DESIGN.md §7, as the agent sends them) give the
tool names and per-turn token counts its profile promises, without any option; an agent without a profile keeps
the safe defaults; settings override a profile per field; a running total becomes per-turn counts over two turns;
the proxy's command names the profile until ``initialize`` names the agent; docs/agents.md lists the profiles.

In process (one engine for both sides: the traced agent makes the tool spans and reports usage), two turns per
agent, the agent identified only by the ``agentInfo.name`` it sends in ``initialize``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from acp_app import SECRET_PATH, TERMINAL_ID, ToolAgent, TraceClient, open_session, prompt
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from paths import TRACE_AGENT, peer_env
from spans import wait_spans_closed

from acp_otel._engine import Engine
from acp_otel._settings import load_settings

S = SpanKind.SERVER
DOCS = Path(__file__).resolve().parent.parent / "docs"

# The tokens the model served per turn: the agents report them each in their own way (below).
SERVED = [(100, 10), (150, 20)]


def _tool_call(tool_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call", "toolCallId": tool_id, "status": "pending", **fields}


def _update(tool_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": "tool_call_update", "toolCallId": tool_id, **fields}


def _done(tool_id: str) -> dict[str, Any]:
    return _update(tool_id, status="completed")


def _acp_usage(tokens: tuple[int, int]) -> dict[str, Any]:
    return {"usage": {"inputTokens": tokens[0], "outputTokens": tokens[1], "totalTokens": sum(tokens)}}


def _per_turn(turn: int) -> dict[str, Any]:
    return _acp_usage(SERVED[turn])


def _running_total(turn: int) -> dict[str, Any]:
    return _acp_usage(tuple(sum(t[i] for t in SERVED[: turn + 1]) for i in (0, 1)))  # type: ignore[arg-type]


def _gemini_quota(turn: int) -> dict[str, Any]:
    tokens = SERVED[turn]
    token_count = {"input_tokens": tokens[0], "output_tokens": tokens[1]}
    return {"_meta": {"quota": {"token_count": token_count, "model_usage": []}}}


LAST_CALLS = [(60, 5), (70, 8)]  # OpenCode: its report is the turn's last model call only


def _opencode_last_call(turn: int) -> dict[str, Any]:
    return _acp_usage(LAST_CALLS[turn])


def _no_usage(turn: int) -> dict[str, Any]:
    return {}


# agent -> (agentInfo.name it sends, one turn's updates (a tool call), the tool name wanted, its source, its usage
# report per turn, the per-turn usage wanted on the span ("turn" counts = SERVED) and acp.usage.source).
AGENTS: dict[str, tuple[str, list[Any], str | None, str | None, Any, str | None]] = {
    # Claude Code: pending tool_call titled "Read File", its name in a later update's _meta.claudeCode.
    "claude-code": (
        "@zed-industries/claude-agent-acp",
        [
            _tool_call("toolu_1", kind="read", title="Read File"),
            _update("toolu_1", title="Read notes.txt", _meta={"claudeCode": {"toolName": "Read"}}),
            _done("toolu_1"),
        ],
        "Read",
        "agent_meta",
        _per_turn,
        "turn",
    ),
    # codex: asks permission before the tool call that announces it; a title that is the command line.
    "codex": (
        "codex-acp",
        [
            ("permission", {"toolCallId": "call_3", "status": "pending", "kind": "execute", "title": "ls"}),
            _tool_call("call_3", kind="execute", title="ls", status="in_progress"),
            _done("call_3"),
        ],
        "execute",
        "kind",
        _no_usage,
        None,
    ),
    # kimi-cli: no kind, no name; the first title the bare tool name, later ones with arguments; fs/* and
    # terminal/* served by the client.
    "kimi-cli": (
        "Kimi Code CLI",
        [
            _tool_call("k/call_1", title="ReadFile", status="in_progress"),
            _update("k/call_1", title="ReadFile: notes.txt"),
            ("request", "fs/read_text_file", {"path": SECRET_PATH}),
            _done("k/call_1"),
        ],
        "ReadFile",
        "title",
        _no_usage,
        None,
    ),
    # Qwen Code: its programmatic name in _meta.toolName; no usage in the result.
    "qwen-code": (
        "qwen-code",
        [_tool_call("q1", kind="read", title="ReadFile", _meta={"toolName": "read_file"}), _done("q1")],
        "read_file",
        "agent_meta",
        _no_usage,
        None,
    ),
    # Gemini CLI: kind only (a title that looks like a name is still content); usage in _meta.quota of the result.
    "gemini-cli": (
        "gemini-cli",
        [_tool_call("read_file-1", kind="read", title="ReadFile"), _done("read_file-1")],
        "read",
        "kind",
        _gemini_quota,
        "agent_meta",
    ),
    # OpenCode: the first title is the bare tool name (later: the file path); usage of the last model call only.
    "opencode": (
        "OpenCode",
        [
            _tool_call("call_oc", kind="read", title="read"),
            _update("call_oc", title="notes.txt", status="in_progress"),
            _done("call_oc"),
        ],
        "read",
        "title",
        _opencode_last_call,
        "last_call",
    ),
    # GitHub Copilot CLI: kind only; usage is the session's running total.
    "copilot-cli": (
        "GitHub Copilot CLI",
        [_tool_call("cp1", kind="execute", title="Shell"), _done("cp1")],
        "execute",
        "kind",
        _running_total,
        "running_total",
    ),
    # Cline: tool_call_update before tool_call, the tool_call re-sent; the tool's identifier before a ':'.
    "cline": (
        "cline",
        [
            _update("cl1", title="read_file: notes.txt", kind="read", status="in_progress"),
            _tool_call("cl1", title="read_file: notes.txt", kind="read", status="in_progress"),
            _done("cl1"),
            _tool_call("cl1", title="read_file: notes.txt", kind="read", status="completed"),  # re-sent: nothing
        ],
        "read_file",
        "title",
        _per_turn,
        "turn",
    ),
    # fast-agent: the first title is the bare tool name; its fs/* through the client.
    "fast-agent": (
        "fast-agent-mcp",
        [
            _tool_call("fa1", kind="read", title="read_text_file"),
            ("request", "fs/read_text_file", {"path": SECRET_PATH}),
            _done("fa1"),
        ],
        "read_text_file",
        "title",
        _no_usage,
        None,
    ),
    # agentao: the first title is the bare tool name.
    "agentao": (
        "agentao",
        [_tool_call("ag1", kind="read", title="read_file"), _done("ag1")],
        "read_file",
        "title",
        _per_turn,
        "turn",
    ),
    # pi-acp: kind only; a terminal in the tool's content without terminal/* requests.
    "pi-acp": (
        "pi-acp",
        [
            _tool_call("pi1", kind="execute", title="bash"),
            _update("pi1", content=[{"type": "terminal", "terminalId": TERMINAL_ID}]),
            _done("pi1"),
        ],
        "execute",
        "kind",
        _per_turn,
        "turn",
    ),
}


class ProfiledAgent(ToolAgent):
    """Names itself ``name`` in ``initialize``; each turn runs ``script`` and answers with ``result(turn)``."""

    def __init__(self, name: str, script: list[Any], result: Any) -> None:
        super().__init__(script)
        self.name = name
        self.result = result
        self.turn = 0

    async def initialize(self, protocol_version: int, *args: Any, **kwargs: Any) -> dict[str, Any]:
        answer = await super().initialize(protocol_version, *args, **kwargs)
        return {**answer, "agentInfo": {"name": self.name, "version": "1.0.0"}}

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        answer = await super().prompt(prompt, session_id, **kwargs)
        extra = self.result(self.turn)
        self.turn += 1
        return {**answer, **extra}


async def _two_turns(pair: Any, counter: Any, agent: ProfiledAgent) -> None:
    p = await pair(agent, TraceClient())
    session_id = await open_session(p.client_conn)
    for _ in SERVED:
        await prompt(p.client_conn, session_id, "go")
    await wait_spans_closed(counter)
    assert not counter.open, counter.open


def _agent_turns(spans: Any) -> list[Any]:
    """The agent side's turn spans (it reports usage here), oldest first."""
    turns = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent" and s.kind == S]
    return sorted(turns, key=lambda s: s.start_time)


def _tool_spans(spans: Any) -> list[Any]:
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]


def _counted(reader: InMemoryMetricReader, name: str) -> int | None:
    data = reader.get_metrics_data()
    values = [
        point.value
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for metric in sm.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]
    return sum(values) if values else None


@pytest.mark.parametrize("agent", sorted(AGENTS))
async def test_each_verified_agent(
    instrument: Any,
    meter_provider: MeterProvider,
    reader: InMemoryMetricReader,
    exporter: Any,
    pair: Any,
    counter: Any,
    agent: str,
) -> None:
    """No option set: the agent's profile, found by its agentInfo.name, names its tools and reads its usage."""
    instrument(meter_provider=meter_provider)
    name, script, tool_name, name_source, report, usage_source = AGENTS[agent]
    await _two_turns(pair, counter, ProfiledAgent(name, script, report))
    spans = exporter.get_finished_spans()
    tools = _tool_spans(spans)
    assert len(tools) == len(SERVED)  # one tool span per tool call and turn
    for tool in tools:
        assert tool.attributes.get("gen_ai.tool.name") == tool_name, (agent, tool.name)
        assert tool.attributes.get("acp.tool_call.name.source") == name_source
    turns = _agent_turns(spans)
    assert len(turns) == len(SERVED)
    for index, turn in enumerate(turns):
        a = turn.attributes
        assert a.get("acp.usage.source") == usage_source, agent
        if usage_source is None:
            assert not any(k.startswith(("gen_ai.usage.", "acp.usage.")) for k in a), a
        elif usage_source == "last_call":  # not the turn's: kept apart, never passed off as gen_ai.usage.*
            assert (a["acp.usage.last_call.input_tokens"], a["acp.usage.last_call.output_tokens"]) == LAST_CALLS[index]
            assert not any(k.startswith("gen_ai.usage.") for k in a)
        else:  # the tokens the model served in that turn
            assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == SERVED[index]
    counted = _counted(reader, "acp.turn.usage.input_tokens"), _counted(reader, "acp.turn.usage.output_tokens")
    if usage_source in (None, "last_call"):  # a last call's counts would undercount: not counted
        assert counted == (None, None)
    else:
        assert counted == (sum(t[0] for t in SERVED), sum(t[1] for t in SERVED))


async def test_unknown_agent_keeps_the_safe_defaults(
    instrument: Any, meter_provider: MeterProvider, reader: InMemoryMetricReader, exporter: Any, pair: Any, counter: Any
) -> None:
    """An agent no profile knows: no names from titles (titles are content), usage taken as sent (turn)."""
    instrument(meter_provider=meter_provider)
    script = [
        _tool_call("u1", title="ReadFile"),  # an identifier-like title, no kind: no name
        _tool_call("u2", kind="read", title="read_file"),  # the kind, not the title
        _tool_call("u3", kind="read", title="x", _meta={"toolName": "declared"}),  # a known _meta key still names
        *(_done(t) for t in ("u1", "u2", "u3")),
    ]
    await _two_turns(pair, counter, ProfiledAgent("some-new-agent", script, _running_total))
    spans = exporter.get_finished_spans()
    names = sorted((s.attributes.get("gen_ai.tool.name") or "") for s in _tool_spans(spans))
    assert names == ["", "", "declared", "declared", "read", "read"]
    turns = _agent_turns(spans)
    sent = [_running_total(i)["usage"] for i in range(len(SERVED))]
    for turn, usage in zip(turns, sent, strict=True):  # as sent: not guessed to be a running total
        assert turn.attributes["gen_ai.usage.input_tokens"] == usage["inputTokens"]
        assert turn.attributes["acp.usage.source"] == "turn"
    assert _counted(reader, "acp.turn.usage.input_tokens") == sum(u["inputTokens"] for u in sent)


@pytest.mark.parametrize(
    ("options", "agent", "title", "tool_name", "usage"),
    [
        # Titles off for an agent whose profile names tools by titles: the kind.
        ({"tool_names_from_titles": False}, "opencode", "grep", "read", "last_call"),
        # Running totals forced for an agent without a profile.
        ({"usage_reports": "running_total"}, "unknown", "grep", "read", "running_total"),
        # Another agent's profile forced on an agent without one: its titles and usage reading.
        ({"agent_profile": "opencode"}, "unknown", "grep", "grep", "last_call"),
        # No profile at all for a known agent: the defaults.
        ({"agent_profile": "none"}, "copilot-cli", "grep", "read", "turn"),
        # Usage read per turn though the profile says running total.
        ({"usage_reports": "turn"}, "copilot-cli", "grep", "read", "turn"),
        # Titles on for an agent without a profile (the identifier before a ':').
        ({"tool_names_from_titles": True}, "unknown", "grep: TODO", "grep", "turn"),
        # The whole title only: one with arguments names nothing.
        ({"tool_names_from_titles": "whole"}, "unknown", "grep: TODO", "read", "turn"),
    ],
)
async def test_settings_override_a_profile_per_field(
    instrument: Any,
    exporter: Any,
    pair: Any,
    counter: Any,
    options: dict[str, Any],
    agent: str,
    title: str,
    tool_name: str,
    usage: str,
) -> None:
    instrument(**options)
    name = {"unknown": "some-new-agent", "opencode": "OpenCode", "copilot-cli": "copilot"}[agent]
    script = [_tool_call("t1", kind="read", title=title), _done("t1")]
    await _two_turns(pair, counter, ProfiledAgent(name, script, _running_total))
    spans = exporter.get_finished_spans()
    assert {s.attributes.get("gen_ai.tool.name") for s in _tool_spans(spans)} == {tool_name}
    first, second = _agent_turns(spans)
    assert first.attributes["acp.usage.source"] == second.attributes["acp.usage.source"] == usage
    prefix = "acp.usage.last_call." if usage == "last_call" else "gen_ai.usage."
    if usage == "running_total":  # the change of the running total: what the turn used
        assert second.attributes[prefix + "input_tokens"] == SERVED[1][0]
    else:  # as sent
        assert second.attributes[prefix + "input_tokens"] == SERVED[0][0] + SERVED[1][0]


def test_profile_settings_from_the_environment() -> None:
    settings = load_settings(
        environ={
            "OTEL_PYTHON_ACP_AGENT_PROFILE": "OpenCode",
            "OTEL_PYTHON_ACP_USAGE_REPORTS": "running_total",
            "OTEL_PYTHON_ACP_TOOL_NAMES_FROM_TITLES": "whole",
        }
    )
    assert (settings.agent_profile, settings.usage_reports, settings.tool_names_from_titles) == (
        "opencode",
        "running_total",
        "whole",
    )
    bad = load_settings(
        environ={
            "OTEL_PYTHON_ACP_AGENT_PROFILE": "no-such-agent",
            "OTEL_PYTHON_ACP_USAGE_REPORTS": "agent_meta",  # a profile's reading, not a setting
            "OTEL_PYTHON_ACP_TOOL_NAMES_FROM_TITLES": "maybe",
        }
    )
    assert (bad.agent_profile, bad.usage_reports, bad.tool_names_from_titles) == ("auto", "auto", "auto")


def _proxied_turn(engine: Engine, peer: Any, turn_id: int, usage: dict[str, Any]) -> None:
    """One turn as the proxy relays it (both directions through ``begin_outgoing``, the agent untraced)."""
    params = {"sessionId": "s", "prompt": [{"type": "text", "text": "go"}]}
    call, _ = engine.begin_outgoing(peer, "session/prompt", params, turn_id, parent=Context(), sender_traced=False)
    for update in (_tool_call(f"t{turn_id}", kind="read", title="read"), _done(f"t{turn_id}")):
        params = {"sessionId": "s", "update": update}
        engine.begin_outgoing(peer, "session/update", params, None, False, parent=Context(), sender_traced=False)
    engine.end_result(call, {"stopReason": "end_turn", **usage})


def test_the_proxys_command_names_the_profile_until_initialize_does() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = Engine(provider.get_tracer("t"), load_settings(environ={}))
    peer = ProfiledAgent("x", [], _no_usage)  # any weak-referenceable object stands for a connection
    engine.note_agent_command(peer, ["npx", "-y", "opencode-ai@1.18.33", "acp"])
    _proxied_turn(engine, peer, 1, _acp_usage((60, 5)))
    # initialize names another agent: its profile from now on.
    call, _ = engine.begin_outgoing(peer, "initialize", {"protocolVersion": 1}, 0, parent=Context())
    engine.end_result(call, {"protocolVersion": 1, "agentInfo": {"name": "GitHub Copilot CLI", "version": "1"}})
    _proxied_turn(engine, peer, 2, _acp_usage((100, 10)))
    _proxied_turn(engine, peer, 3, _acp_usage((250, 30)))
    spans = exporter.get_finished_spans()
    tools = {s.attributes["gen_ai.tool.call.id"]: s.attributes for s in _tool_spans(spans)}
    assert tools["t1"]["acp.tool_call.name.source"] == "title"  # OpenCode's, by the command
    assert tools["t2"]["acp.tool_call.name.source"] == "kind"  # Copilot CLI's: no names in titles
    turns = sorted((s for s in spans if s.name.startswith("session/prompt")), key=lambda s: s.start_time)
    assert [t.attributes["acp.usage.source"] for t in turns] == ["last_call", "running_total", "running_total"]
    assert [t.attributes.get("gen_ai.usage.input_tokens") for t in turns] == [None, 100, 150]
    provider.shutdown()


@pytest.mark.parametrize("script_name", ["opencode", "some_agent"])
async def test_a_spawned_agents_command_names_its_profile(
    instrument: Any, exporter: Any, counter: Any, tmp_path: Path, script_name: str
) -> None:
    """An agent spawned through the SDK whose agentInfo.name (``test-agent``) names no profile: its command does
    (``python opencode.py`` is ``opencode``), so its first titles name its tool calls; another command's do not."""
    from acp import spawn_agent_process

    script = tmp_path / f"{script_name}.py"
    run = "runpy.run_path(sys.argv[0], run_name='__main__')"
    script.write_text(f"import runpy, sys\nsys.argv = [{str(TRACE_AGENT)!r}, 'tools']\n{run}\n")
    client = TraceClient()
    async with spawn_agent_process(client, sys.executable, str(script), env=peer_env()) as (conn, _proc):
        session_id = await open_session(conn)
        await prompt(conn, session_id, "kimi")  # its first titles are bare names: ReadFile, Shell
    await wait_spans_closed(counter)
    names = sorted(str(s.attributes.get("gen_ai.tool.name")) for s in _tool_spans(exporter.get_finished_spans()))
    assert names == (["ReadFile", "Shell"] if script_name == "opencode" else ["None", "None"])


# ------------------------------------------------------------------------------------- docs/agents.md


def profiles_table() -> str:
    """The table of docs/agents.md's "Agent profiles" section, as the profiles say (print it to update)."""
    from acp_otel._agent_profiles import PROFILES, TITLE_WHOLE, UNKNOWN

    def tool_name(p: Any) -> str:
        places = ["ACP `name`"]
        places += [f"`_meta.{'.'.join(path)}`" for path in p.tool_name_meta]
        if p.tool_name_titles is not None:
            whole = p.tool_name_titles == TITLE_WHOLE
            places.append("the whole first title" if whole else "the first title's identifier")
        return ", else ".join(places) + ", else the kind"

    rows = [
        "| profile | agent | identified by | verified with | sends as tool name | acp-otel's tool name "
        "| sends as usage | counts read as (`acp.usage.source`) | trace parent from | its own telemetry |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in (*PROFILES, UNKNOWN):
        names = ", ".join(f"`{a}`" for a in p.aliases) or "—"
        keys = ", ".join(f"`{k}`" for k in p.trace_keys) or "—"
        rows.append(
            f"| `{p.key}` | {p.title} | {names} | {p.verified or '—'} | {p.sends_tool_name} | {tool_name(p)} "
            f"| {p.sends_usage} | `{p.usage}` | {keys} | {p.telemetry or '—'} |"
        )
    return "\n".join(rows) + "\n"


def test_docs_list_the_profiles() -> None:
    text = (DOCS / "agents.md").read_text(encoding="utf-8")
    table = profiles_table()
    assert table in text, f"docs/agents.md's profile table differs from the profiles; it should read:\n{table}"
    assert len(re.findall(r"^\| `[a-z-]+` \|", table, re.M)) == 12  # eleven agents and the defaults


if __name__ == "__main__":
    print(profiles_table(), end="")
