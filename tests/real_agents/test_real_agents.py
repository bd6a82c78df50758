"""Real ACP agents (Claude Code, codex, kimi-cli, Qwen Code) behind ``acp-otel proxy``, offline.

Each test drives one prompt turn of a real agent process against the scripted model (``model_server.py``):
the model reads a file, writes one, runs a shell command and answers. The editor stand-in (``editor.py``)
allows every permission and serves ``fs/*`` / ``terminal/*``. The proxy's spans (and a traced editor's or a
traced agent's) are exported over OTLP/HTTP to a loopback receiver (``sink.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agents
import pytest
from editor import Run, lines, run_turn
from model_server import ModelServer, Script
from otlp_sink import Span
from sink import Sink

pytestmark = pytest.mark.timeout(600)

TRACE_KEYS = {"traceparent", "tracestate", "baggage", "qwen.telemetry.traceparent", "qwen.telemetry.tracestate"}
PROXY_SERVICE = "proxy"
EDITOR_SERVICE = "editor"
PROXY_ARGS = ["--service-name", PROXY_SERVICE]


@dataclass(frozen=True)
class Expect:
    """What an agent's turn gives: the documented rules (docs/tool-calls.md, docs/genai.md), its observed behaviour."""

    tools: tuple[str, str, str]  # gen_ai.tool.name of the read, write and shell calls
    proxy_options: tuple[str, ...] = ()  # extra env for the proxy (OPTION=value)
    client_calls: tuple[tuple[str, int], ...] = ()  # (client method, index of the tool call it serves)
    input_tokens: int | None = None
    output_tokens: int | None = None
    context_used: int | None = None
    context_size: int | None = None
    cost: tuple[float, str] | None = None


EXPECT = {
    # kimi sends neither name nor kind: its first title is the tool's name, taken by its profile (no option set).
    "kimi": Expect(
        ("ReadFile", "WriteFile", "Shell"),
        client_calls=(
            ("fs/read_text_file", 0),
            ("fs/write_text_file", 1),
            ("terminal/create", 2),
            ("terminal/wait_for_exit", 2),
            ("terminal/output", 2),
            ("terminal/release", 2),
        ),
    ),
    # Token counts: what the scripted model served in the turn (model.served), filled in by usage_expected.
    "claude": Expect(("Read", "Write", "Bash"), input_tokens=-1, output_tokens=-1, context_size=200000),
    "codex": Expect(("read", "execute", "execute"), context_used=-1, context_size=258400),
    "qwen": Expect(
        ("read_file", "write_file", "run_shell_command"),
        client_calls=(("fs/read_text_file", 0), ("fs/write_text_file", 1)),
    ),
}


def make_agent(name: str, tmp_path: Path, model: ModelServer, tag: str, **kwargs: Any) -> agents.Agent:
    home = tmp_path / f"home-{tag}"
    home.mkdir()
    return getattr(agents, f"{name}_agent")(home, model.url, **kwargs)


def proxy_env(agent: agents.Agent, sink: Sink, *options: str) -> dict[str, str]:
    env = {**agent.env, **sink.env()}
    env.update(o.split("=", 1) for o in options)  # type: ignore[arg-type]
    return env


def prompt_text(script: Script) -> str:
    return f"Read the file, write another and run a command. {script.canary}-PROMPT"


def turn_of(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]


def tools_of(spans: list[Span]) -> list[Span]:
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]


def by_id(spans: list[Span]) -> dict[str, Span]:
    return {s.span_id: s for s in spans}


def tool_above(span: Span, index: dict[str, Span]) -> Span | None:
    """The nearest ``execute_tool`` ancestor of ``span`` below its turn (spans of the same request on the other
    side of the proxy are passed through), or None."""
    parent = index.get(span.parent_id or "")
    while parent is not None:
        operation = parent.attributes.get("gen_ai.operation.name")
        if operation == "execute_tool":
            return parent
        if operation == "invoke_agent":
            return None
        parent = index.get(parent.parent_id or "")
    return None


def assert_turn_ran(run: Run, script: Script) -> None:
    assert run.result is not None and run.result.stop_reason == "end_turn", run.stderr[-2000:]
    assert script.answer in run.texts()
    assert script.write_path.read_text().strip() == script.write_body.strip()
    assert len(run.tool_call_ids()) == 3, run.tool_call_ids()


def _strip_trace_keys(original: Any, forwarded: Any) -> Any:
    """``forwarded`` with the trace keys that ``original`` lacks removed from its params/result ``_meta``."""
    if not isinstance(forwarded, dict) or not isinstance(original, dict):
        return forwarded
    out = dict(forwarded)
    for part in ("params", "result"):
        body, before = out.get(part), original.get(part)
        if not isinstance(body, dict) or not isinstance(body.get("_meta"), dict):
            continue
        before_meta = before.get("_meta") if isinstance(before, dict) else None
        meta = {
            k: v
            for k, v in body["_meta"].items()
            if not (k in TRACE_KEYS and (not isinstance(before_meta, dict) or k not in before_meta))
        }
        body = dict(body)
        if meta or before_meta is not None:
            body["_meta"] = meta
        else:
            del body["_meta"]
        out[part] = body
    return out


def assert_same_bytes(before: bytes, after: bytes) -> int:
    """Every line of ``before`` arrives as is in ``after``, or differs only by injected trace keys; the count
    of lines that changed."""
    a, b = lines(before), lines(after)
    assert len(a) == len(b), (len(a), len(b))
    changed = 0
    for old, new in zip(a, b, strict=True):
        if old == new:
            continue
        changed += 1
        o, n = json.loads(old), json.loads(new)
        assert json.dumps(o) == json.dumps(_strip_trace_keys(o, n)), (old[:500], new[:500])
    assert before.endswith(b"\n") == after.endswith(b"\n")
    return changed


class Checks:
    """Collects failed checks so that one run reports every broken rule at once (then fails with all of them)."""

    def __init__(self) -> None:
        self.failed: list[str] = []

    def __call__(self, ok: Any, label: str, detail: Any = "") -> bool:
        if not ok:
            self.failed.append(f"{label}: {str(detail)[:600]}")
        return bool(ok)

    def done(self) -> None:
        assert not self.failed, "\n".join(["", *self.failed])


def usage_expected(name: str, model: ModelServer) -> Expect:
    """EXPECT[name] with the token counts of the last turn the scripted model served (they differ per call)."""
    import dataclasses

    expect = EXPECT[name]
    calls = model.turns[-1]
    served_in, served_out = model.served(len(model.turns) - 1)
    if name == "claude":  # the turn's sums; cost at the model's list price ($3 / $15 per million tokens)
        cost = round(served_in * 3e-6 + served_out * 15e-6, 10)
        return dataclasses.replace(expect, input_tokens=served_in, output_tokens=served_out, cost=(cost, "USD"))
    if name == "codex":  # context used: the last call's input and output
        return dataclasses.replace(expect, context_used=sum(calls[-1]))
    return expect


def assert_spans(
    name: str,
    run: Run,
    spans: list[Span],
    script: Script,
    sink: Sink,
    tool_service: str,
    services: set[str],
    check: Checks,
    model: ModelServer,
) -> None:
    """The span contract on one turn: one trace, named tool spans on ``tool_service``, permissions, fs and
    terminal under their tools, usage, and no content."""
    expect = usage_expected(name, model)
    mine = [s for s in spans if s.service in services]
    turns = turn_of(mine)
    check(turns, "a turn span (invoke_agent)", [(s.service, s.name) for s in mine])
    check(len({t.trace_id for t in turns}) == 1, "one trace per turn", [(t.service, t.trace_id) for t in turns])
    trace_ids = {t.trace_id for t in turns}
    call_ids = run.tool_call_ids()
    tools = tools_of(mine)
    # One tool span per tool call, on the side closest to the tool, named by the rules of docs/tool-calls.md.
    check(
        sorted(str(t.attributes.get("gen_ai.tool.call.id")) for t in tools) == sorted(call_ids),
        "one execute_tool span per tool call",
        [(t.service, t.name, t.attributes.get("gen_ai.tool.call.id")) for t in tools],
    )
    by_call = {t.attributes.get("gen_ai.tool.call.id"): t for t in tools}
    for call_id, tool_name in zip(call_ids, expect.tools, strict=False):
        tool = by_call.get(call_id)
        if not check(tool is not None, f"tool span for {call_id}"):
            continue
        check(tool.service == tool_service, f"tool span {tool_name} on {tool_service}", tool.service)
        check(tool.trace_id in trace_ids, f"tool span {tool_name} in the turn's trace")
        check(
            tool.attributes.get("gen_ai.tool.name") == tool_name and tool.name == f"execute_tool {tool_name}",
            f"tool span named execute_tool {tool_name}",
            (tool.name, tool.attributes.get("gen_ai.tool.name")),
        )
    index = by_id(mine)
    # Every permission sits under the tool call it asks about.
    asked = [getattr(p, "tool_call_id", None) or p["toolCallId"] for p in run.editor.permissions]
    permissions = [s for s in mine if s.name == "session/request_permission"]
    check(len({s.span_id for s in permissions}) >= len(asked), "a span per permission", (len(permissions), asked))
    for span in permissions:
        parent = tool_above(span, index)
        check(
            parent is not None and parent.attributes.get("gen_ai.tool.call.id") in asked,
            "permission under its tool span",
            parent and (parent.name, parent.attributes.get("gen_ai.tool.call.id")),
        )
    # fs/* and terminal/* under the tool call they serve.
    for method, position in expect.client_calls:
        served = [s for s in mine if s.name == method]
        if not check(served, f"a {method} span", [s.name for s in mine]):
            continue
        for span in served:
            parent = tool_above(span, index)
            check(
                parent is not None and parent.attributes.get("gen_ai.tool.call.id") == call_ids[position],
                f"{method} under its tool span ({expect.tools[position]})",
                parent and parent.name,
            )
    # Usage, cost and context on the turn span of the side closest to the agent, once.
    reported = [t for t in turns if any(k.startswith(("gen_ai.usage.", "acp.usage.")) for k in t.attributes)]
    wanted = {
        "gen_ai.usage.input_tokens": expect.input_tokens,
        "gen_ai.usage.output_tokens": expect.output_tokens,
        "acp.usage.context.used": expect.context_used,
        "acp.usage.context.size": expect.context_size,
        "acp.usage.cost.amount": expect.cost[0] if expect.cost else None,
        "acp.usage.cost.currency": expect.cost[1] if expect.cost else None,
    }
    if any(v is not None for v in wanted.values()):
        if check(len(reported) == 1, "usage on exactly one turn span", [(t.service, t.attributes) for t in turns]):
            (turn,) = reported
            check(turn.service == tool_service, f"usage reported by {tool_service}", turn.service)
            for key, value in wanted.items():
                got = turn.attributes.get(key)
                if value is None:
                    check(key not in turn.attributes, f"no {key}", got)
                elif isinstance(value, float):
                    check(isinstance(got, float) and abs(got - value) < 1e-9, f"{key} == {value}", got)
                else:
                    check(got == value, f"{key} == {value}", got)
    else:
        check(reported == [], "no usage attributes (the agent sends none)", [t.attributes for t in reported])
    # No content by default: the canary (in the prompt, file paths and contents, the command, the answer) is in
    # no exported span, event, status or resource.
    check(sink.leaks(script.canaries(), services) == [], "no content in telemetry (canary absent)")


async def _direct_and_proxied(name: str, tmp_path: Path, model: ModelServer, sink: Sink, script: Script) -> None:
    expect = EXPECT[name]
    direct_agent = make_agent(name, tmp_path, model, "direct")
    direct = await run_turn(
        direct_agent.command,
        {**direct_agent.env, "OTEL_SDK_DISABLED": "true"},
        script.workspace,
        prompt_text(script),
        grace=direct_agent.grace,
    )
    assert_turn_ran(direct, script)
    script.write_path.unlink()
    model.begin_turn()

    agent = make_agent(name, tmp_path, model, "proxied")
    env = proxy_env(agent, sink, *expect.proxy_options)
    run = await run_turn(
        agent.command, env, script.workspace, prompt_text(script), proxy_args=PROXY_ARGS, grace=agent.grace
    )
    assert_turn_ran(run, script)
    check = Checks()
    # Every byte through, except the trace keys the proxy adds to the agent's and the editor's requests.
    for label, before, after in (
        ("editor -> agent", run.editor_sent, run.agent_received),
        ("agent -> editor", run.agent_sent, run.editor_received),
    ):
        try:
            assert_same_bytes(before, after)
        except AssertionError as exc:
            check(False, f"bytes unchanged but for trace keys, {label}", exc)
    check(run.editor_sent != run.agent_received, "the proxy injected trace context (the byte check is not vacuous)")
    # Editor shutdown as without the proxy: same exit status, and no slower (generous margin for the load).
    check(run.returncode == direct.returncode, "exit status as without the proxy", (run.returncode, direct.returncode))
    check(
        run.extra.get("signalled") == direct.extra.get("signalled"),
        "the same shutdown steps as without the proxy",
        (run.extra.get("signalled"), direct.extra.get("signalled")),
    )
    check(
        run.shutdown_seconds < direct.shutdown_seconds * 2 + 5,
        "shutdown as fast as without the proxy",
        (run.shutdown_seconds, direct.shutdown_seconds),
    )
    # The agent's own stderr passes through the proxy; the proxy itself says nothing there.
    check(
        not any(word in run.stderr for word in ("Traceback", "acp-otel", "acp_otel")),
        "the proxy says nothing on stderr",
        run.stderr[-1000:],
    )
    spans = sink.wait_for(lambda s: len(tools_of(s)) >= 3 and turn_of(s))
    assert_spans(name, run, spans, script, sink, PROXY_SERVICE, {PROXY_SERVICE}, check, model)
    check.done()


@pytest.mark.parametrize("name", ["kimi", "claude", "codex", "qwen"])
async def test_untraced_editor(name: str, tmp_path: Path, model: ModelServer, sink: Sink, script: Script) -> None:
    """Untraced editor -> proxy -> agent, against the same agent run directly (bytes, shutdown, spans)."""
    await _direct_and_proxied(name, tmp_path, model, sink, script)


@pytest.mark.parametrize("name", ["kimi", "claude", "codex", "qwen"])
async def test_traced_editor(name: str, tmp_path: Path, model: ModelServer, sink: Sink, script: Script) -> None:
    """Traced editor -> proxy -> agent: one trace from the editor's turn down to the proxy's tool spans, and
    each fact (tool call, usage) reported once, by the proxy (the side closest to the untraced agent)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from acp_otel import AcpInstrumentor

    expect = EXPECT[name]
    agent = make_agent(name, tmp_path, model, "traced-editor")
    provider = TracerProvider(resource=Resource.create({"service.name": EDITOR_SERVICE}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{sink.endpoint}/v1/traces")))
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        run = await run_turn(
            agent.command,
            proxy_env(agent, sink, *expect.proxy_options),
            script.workspace,
            prompt_text(script),
            proxy_args=PROXY_ARGS,
            grace=agent.grace,
        )
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    assert_turn_ran(run, script)
    spans = sink.wait_for(
        lambda s: len(tools_of(s)) >= 3 and {t.service for t in turn_of(s)} >= {EDITOR_SERVICE, PROXY_SERVICE}
    )
    editor_turns = [t for t in turn_of(spans) if t.service == EDITOR_SERVICE]
    assert len(editor_turns) == 1
    proxy_spans = [s for s in spans if s.service == PROXY_SERVICE]
    assert {s.trace_id for s in turn_of(spans)} == {editor_turns[0].trace_id}
    assert all(s.trace_id == editor_turns[0].trace_id for s in tools_of(spans))
    assert proxy_spans
    check = Checks()
    assert_spans(name, run, spans, script, sink, PROXY_SERVICE, {EDITOR_SERVICE, PROXY_SERVICE}, check, model)
    check.done()


async def test_kimi_traced_in_process(tmp_path: Path, model: ModelServer, sink: Sink, script: Script) -> None:
    """Untraced editor -> proxy -> kimi-cli traced in its own process by acp-otel (``opentelemetry-instrument``):
    the tool spans are kimi's (closest to the tool), the proxy makes none, and it is all one trace."""
    import shutil
    import sys

    launcher = shutil.which("opentelemetry-instrument", path=str(Path(sys.executable).parent))
    if launcher is None:
        pytest.skip("opentelemetry-instrument is not installed beside this Python")
    agent = make_agent("kimi", tmp_path, model, "in-process")
    # The proxy keeps its exporter settings to itself: the agent's own are given in its command.
    agent.command[:0] = [
        "env",
        *(f"{k}={v}" for k, v in sink.env().items() if k.startswith("OTEL_EXPORTER_")),
        launcher,
    ]
    env = proxy_env(agent, sink, "OTEL_PYTHON_ACP_TOOL_NAMES_FROM_TITLES=true")
    env["OTEL_SERVICE_NAME"] = "kimi"  # the agent's (the proxy is named by --service-name)
    run = await run_turn(
        agent.command, env, script.workspace, prompt_text(script), proxy_args=PROXY_ARGS, grace=agent.grace
    )
    assert_turn_ran(run, script)
    spans = sink.wait_for(
        lambda s: len(tools_of(s)) >= 3 and {t.service for t in turn_of(s)} >= {"kimi", PROXY_SERVICE}
    )
    check = Checks()
    check(not [t for t in tools_of(spans) if t.service == PROXY_SERVICE], "no tool span from the proxy")
    check(len({s.trace_id for s in turn_of(spans)}) == 1, "one trace")
    assert_spans("kimi", run, spans, script, sink, "kimi", {"kimi", PROXY_SERVICE}, check, model)
    check.done()


async def test_qwen_own_telemetry(tmp_path: Path, model: ModelServer, sink: Sink, script: Script) -> None:
    """Qwen Code traces itself (OTLP/JSON, chunked, set up by its user) and reads ``qwen.telemetry.traceparent``,
    which the proxy writes for it unasked (without ``--agent-telemetry`` or ``--extra-trace-keys``): with the proxy
    set to leave tool spans and usage to the agent, the proxy's turn, ``qwen-code.interaction`` and Qwen's tool
    spans are one trace, with one ``execute_tool`` per tool call."""
    agent = make_agent("qwen", tmp_path, model, "own-telemetry", telemetry_endpoint=sink.endpoint)
    env = proxy_env(
        agent,
        sink,
        "OTEL_PYTHON_ACP_TOOL_SPANS=never",
        "OTEL_PYTHON_ACP_USAGE=never",
    )
    run = await run_turn(  # no byte tap: the proxy knows the agent from its command
        agent.command, env, script.workspace, prompt_text(script), proxy_args=PROXY_ARGS, grace=agent.grace, tap=False
    )
    assert_turn_ran(run, script)
    spans = sink.wait_for(
        lambda s: (
            any(x.name == "qwen-code.interaction" for x in s) and turn_of([x for x in s if x.service == PROXY_SERVICE])
        ),
        timeout=60,
    )
    spans = sink.wait_for(lambda s: len([t for t in tools_of(s) if t.service != PROXY_SERVICE]) >= 3, timeout=60)
    check = Checks()
    check(sink.errors == [], "the receiver decoded every export", sink.errors)
    (proxy_turn,) = turn_of([s for s in spans if s.service == PROXY_SERVICE])
    (interaction,) = [s for s in spans if s.name == "qwen-code.interaction"]
    index = by_id(spans)
    # qwen-code.interaction continues the proxy's turn (its parent is the proxy's span carrying the prompt).
    check(interaction.trace_id == proxy_turn.trace_id, "qwen-code.interaction in the proxy turn's trace")
    parent = index.get(interaction.parent_id or "")
    check(parent is not None and parent.service == PROXY_SERVICE, "qwen-code.interaction under the proxy's span")
    tools = tools_of(spans)
    check(not [t for t in tools if t.service == PROXY_SERVICE], "no tool span from the proxy (tool_spans=never)")
    check(len(tools) == len(run.tool_call_ids()) == 3, "one execute_tool per tool call", [t.name for t in tools])
    check(all(t.trace_id == proxy_turn.trace_id for t in tools), "Qwen's tool spans in the proxy turn's trace")
    check(
        not [k for k in proxy_turn.attributes if k.startswith(("gen_ai.usage.", "acp.usage."))],
        "no usage on the proxy's turn (usage=never)",
    )
    check(sink.leaks(script.canaries(), {PROXY_SERVICE}) == [], "no content in the proxy's telemetry")
    check.done()
