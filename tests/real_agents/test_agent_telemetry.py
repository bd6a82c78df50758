"""The agents' own telemetry through ``acp-otel proxy --agent-telemetry`` (docs/agent-telemetry.md).

Gemini CLI, OpenCode and Qwen Code each run one scripted turn behind the proxy with nothing of their own telemetry
configured; the test's receiver stands for the user's backend, and the proxy alone is told where it is, with a
header the backend requires. With the option on: the agent's model-call spans arrive inside the proxy's turn trace,
under the turn span, each a model call by the GenAI conventions (a defined ``gen_ai.operation.name``, Gemini CLI's
with its provider); its logs (and metrics, for the agents that have any) arrive, each log record that names a span
in that span's trace; every request reaching the backend carried the header, which was never in the environment of
the running agent (``/proc/PID/environ``); no content by default (the turn's canaries: file names and contents,
the command, the prompt, the answer); each tool call reported by exactly one ``execute_tool`` span (the agent's,
else the proxy's); the turn's trace under a hundred spans (OpenCode sends some 930), none of them dangling. With
the option off: the proxy's own turn and tool spans, nothing of the agent's at the backend, and no backend setting
in the agent's environment; an endpoint given in the agent's own command (``env VAR=VALUE``) is the agent's, and it
exports there. Claude Code's ACP adapter and fast-agent run the option-on case too (their model calls, Claude Code's
log events; fast-agent exports traces only and makes two tool calls of the script's three).

The agent runs without the byte tap (the proxy names the agent's profile from its command line).
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agents
import pytest
from editor import Run, run_turn
from google.protobuf import json_format
from model_server import ModelServer, Script
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from otlp_sink import Span, _value
from sink import Sink
from test_real_agents import PROXY_ARGS, PROXY_SERVICE, Checks, by_id, make_agent, tools_of, turn_of

pytestmark = pytest.mark.timeout(600)

AGENTS = ["gemini", "opencode", "qwen"]
# With the option on only: Claude Code's adapter (its spans and log events) and fast-agent (its spans).
AGENTS_ON = [*AGENTS, "claude", "fast_agent"]
# Each agent's span per model call (as its own telemetry names it).
MODEL_CALL = {
    "gemini": "llm_call",
    "opencode": "ai.streamText.doStream",  # the AI SDK's provider call (the proxy switches its spans on)
    "qwen": "qwen-code.llm_request",
    "claude": "claude_code.llm_request",
    "fast_agent": "openai.chat",
}
# The agent's own spans that report a tool call (``execute_tool`` spans with ``gen_ai.tool.call.id``, OpenCode's
# once the proxy maps them): none for Gemini CLI, Claude Code and fast-agent, whose tool calls the proxy's spans
# report.
TOOL_REPORT = {
    "gemini": set(),
    "opencode": {"Tool.execute"},
    "qwen": {"qwen-code.tool"},
    "claude": set(),
    "fast_agent": set(),
}
MODEL_CALL_OPERATIONS = {"chat", "generate_content", "text_completion", "embeddings"}
MAX_TURN_SPANS = 100  # the turn's trace, by default (only what a user reads)
HAS_LOGS = {"gemini", "opencode", "qwen", "claude"}  # fast-agent exports traces only
HAS_METRICS = {"gemini", "qwen"}  # OpenCode exports traces and logs only; Claude Code's come every 5 s
# Where the agent's own spans carry the ACP session id (its profile's session keys): (span name, attribute).
SESSION_ID = {
    "gemini": ("llm_call", "gen_ai.conversation.id"),
    "opencode": ("Tool.execute", "session.id"),
    "qwen": ("qwen-code.llm_request", "gen_ai.conversation.id"),
}
# Tool calls the agent makes of the script's three: fast-agent's write tool first reads the file it writes (the
# editor answers that it does not exist), and it has no terminal.
TOOL_CALLS = {"fast_agent": 2}


def _agent(name: str, tmp_path: Path, model: ModelServer, tag: str) -> tuple[agents.Agent, Path]:
    agent = make_agent(name, tmp_path, model, tag)
    home = tmp_path / f"home-{tag}"
    if name == "gemini":  # the harness switches Gemini's telemetry off in its settings: nothing of the kind here
        path = home / ".gemini" / "settings.json"
        settings = json.loads(path.read_text())
        settings.pop("telemetry", None)
        path.write_text(json.dumps(settings))
    return agent, home


def _agent_environs(home: Path) -> list[dict[str, str]]:
    """The environments of the running processes of this case other than the proxy (the agent and its children)."""
    marker = f"HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in environ and b"acp_otel.cli" not in cmdline:
            found.append(dict(e.decode(errors="replace").partition("=")[::2] for e in environ if b"=" in e))
    return found


def _decode(path: str, body: bytes) -> Any:
    """A logs or metrics export the backend received (the proxy forwards protobuf; JSON is read too)."""
    request: Any = ExportLogsServiceRequest() if path.endswith("/v1/logs") else ExportMetricsServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception:
        json_format.Parse(body, request, ignore_unknown_fields=True)
    return request


def _services(sink: Sink, signal: str) -> set[str]:
    """The ``service.name`` of every resource in the backend's ``signal`` exports (``logs`` / ``metrics``)."""
    services = set()
    for path, body in list(sink.other):
        if path.endswith(f"/v1/{signal}"):
            request = _decode(path, body)
            for entry in request.resource_logs if signal == "logs" else request.resource_metrics:
                services |= {str(_value(kv.value)) for kv in entry.resource.attributes if kv.key == "service.name"}
    return services


def _under(span: Span, ancestor: Span, index: dict[str, Span]) -> bool:
    parent = index.get(span.parent_id or "")
    while parent is not None:
        if parent.span_id == ancestor.span_id:
            return True
        parent = index.get(parent.parent_id or "")
    return False


def _wait(sink: Sink, done: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; errors {sink.errors}")
        time.sleep(0.2)


async def _proxied(
    name: str,
    option: bool,
    tmp_path: Path,
    model: ModelServer,
    sink: Sink,
    script: Script,
    prefix: tuple[str, ...] = (),
    capture: bool = False,
    tool_calls: int = 3,
) -> tuple[Run, list[dict[str, str]], str]:
    """One turn through the proxy (the agent's command after ``prefix``; ``--capture-content`` with ``capture``)
    making at least ``tool_calls`` tool calls; the environments of the agent's processes (seen before the prompt)
    and the backend's secret header value."""
    agent, home = _agent(name, tmp_path, model, "on" if option else "off")
    agent.command[:0] = prefix
    secret = f"backend-secret-{uuid.uuid4().hex}"
    env = {
        **agent.env,
        **sink.env(),
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_LOGS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-backend-key={secret}",
    }
    environs: list[dict[str, str]] = []

    def before_prompt() -> None:
        model.begin_turn()
        environs.extend(_agent_environs(home))

    args = [*PROXY_ARGS, *(["--agent-telemetry"] if option else []), *(["--capture-content"] if capture else [])]
    try:
        run = await run_turn(
            agent.command,
            env,
            script.workspace,
            f"Read the file, write another and run a command. {script.canary}-PROMPT",
            proxy_args=args,
            before_prompt=before_prompt,
            after_turn=model.wait_idle,
            grace=agent.grace,
            timeout=300,
            tap=False,
        )
    finally:
        agents.end_leftovers(home)
    assert run.result is not None and run.result.stop_reason == "end_turn", (run.stderr[-3000:], model.unknown_tools)
    assert len(run.tool_call_ids()) >= tool_calls, run.tool_call_ids()
    assert environs, "no agent process found while the turn ran"
    return run, environs, secret


def _no_backend_settings(check: Checks, environs: list[dict[str, str]], secret: str) -> None:
    leaked = [
        (k, v) for env in environs for k, v in env.items() if secret in v or k.startswith("OTEL_EXPORTER_OTLP_HEAD")
    ]
    check(not leaked, "no backend header in the agent's environment", leaked)
    endpoints = {env.get("OTEL_EXPORTER_OTLP_ENDPOINT") for env in environs}
    check(all(e is None or e.startswith("http://127.0.0.1:") for e in endpoints), "no backend endpoint", endpoints)


def _reports_of(tool_call_id: str, spans: list[Span]) -> list[Span]:
    """The spans that report the tool call as the conventions say: ``execute_tool`` with its ``gen_ai.tool.call.id``
    (the proxy's, the agent's)."""
    return [
        s
        for s in spans
        if s.attributes.get("gen_ai.operation.name") == "execute_tool"
        and s.attributes.get("gen_ai.tool.call.id") == tool_call_id
    ]


def _log_records(sink: Sink) -> list[tuple[str, str, str]]:
    """(service, trace id, span id) of every log record at the backend that names a span."""
    out = []
    for path, body in list(sink.other):
        if path.endswith("/v1/logs"):
            for entry in _decode(path, body).resource_logs:
                service = next(str(_value(kv.value)) for kv in entry.resource.attributes if kv.key == "service.name")
                for scope in entry.scope_logs:
                    out += [(service, r.trace_id.hex(), r.span_id.hex()) for r in scope.log_records if r.span_id]
    return out


@pytest.mark.parametrize("name", AGENTS_ON)
async def test_agent_telemetry_on(name: str, tmp_path: Path, model: ModelServer, sink: Sink, script: Script) -> None:
    run, environs, secret = await _proxied(
        name, True, tmp_path, model, sink, script, tool_calls=TOOL_CALLS.get(name, 3)
    )
    model_call = MODEL_CALL[name]
    spans = sink.wait_for(
        lambda s: any(x.name == model_call for x in s) and turn_of([x for x in s if x.service == PROXY_SERVICE]),
        timeout=60,
    )
    if name in HAS_LOGS:
        _wait(sink, lambda: _services(sink, "logs") - {PROXY_SERVICE}, "the agent's logs")
    if name in HAS_METRICS:
        _wait(sink, lambda: _services(sink, "metrics") - {PROXY_SERVICE}, "the agent's metrics")
    spans = sink.snapshot()
    check = Checks()
    check(sink.errors == [], "the backend decoded every export", sink.errors)
    # The GenAI instrumentations' content switch as the proxy sets it is one they all read (fast-agent's, on
    # opentelemetry-util-genai, warns on a boolean).
    check("is not a valid option" not in run.stderr, "no agent warns about the proxy's switches", run.stderr[-2000:])
    (turn,) = turn_of([s for s in spans if s.service == PROXY_SERVICE])
    index = by_id(spans)
    calls = [s for s in spans if s.name == model_call and s.service != PROXY_SERVICE]
    in_turn = [s for s in calls if turn.start_ns <= s.start_ns <= turn.end_ns]
    if name in ("gemini", "qwen", "opencode"):  # the served tokens on its spans: each answer served is one of them
        # (Qwen Code starts calls of its own as the turn answers, one perhaps after the answer: not the turn's.)
        seen = Counter(s.attributes.get("gen_ai.usage.input_tokens") for s in calls)
        check(all(seen[c[0]] == 1 for c in model.turns[-1]), "a model-call span per model call", [seen, model.turns])
        check(bool(in_turn), "model calls in the turn", in_turn)
    else:
        check(len(in_turn) >= len(model.turns[-1]), "a model-call span per model call", [len(in_turn), model.turns])
    check(all(s.trace_id == turn.trace_id for s in in_turn), "the model calls in the turn's trace", in_turn)
    check(all(_under(s, turn, index) for s in in_turn), "the model calls under the turn span", in_turn)
    operations = [s.attributes.get("gen_ai.operation.name") for s in in_turn]
    check(all(o in MODEL_CALL_OPERATIONS for o in operations), "the model calls by the conventions", operations)
    if name in ("gemini", "qwen", "claude", "opencode"):  # their model-call spans carry the tokens
        check(all("gen_ai.usage.input_tokens" in s.attributes for s in in_turn), "tokens on the model calls", in_turn)
    if name == "opencode":  # each model call once (its LLM.run is none), with the tokens the model served
        agents_calls = [
            s
            for s in spans
            if s.service != PROXY_SERVICE
            and s.attributes.get("gen_ai.operation.name") in MODEL_CALL_OPERATIONS
            and turn.start_ns <= s.start_ns <= turn.end_ns
        ]
        check(len(agents_calls) == len(model.turns[-1]), "one model-call span per model call", agents_calls)
        used = tuple(
            sum(int(str(s.attributes.get(f"gen_ai.usage.{k}_tokens"))) for s in in_turn) for k in ("input", "output")
        )
        check(used == model.served(len(model.turns) - 1), "the tokens the model served", [used, model.turns])
        providers = {s.attributes.get("gen_ai.provider.name") for s in in_turn}
        check(providers == {"local"}, "the provider, named as the conventions say", providers)
    if name == "gemini":  # its own operation name kept beside the defined one, the provider added
        mapped = {
            (c.attributes.get("acp.agent_span.operation.name"), c.attributes.get("gen_ai.provider.name"))
            for c in in_turn
        }
        check(all(v == ("llm_call", "gcp.gemini") for v in mapped), "Gemini CLI's model calls mapped", mapped)
    in_trace = [s for s in spans if s.trace_id == turn.trace_id]
    check(len(in_trace) < MAX_TURN_SPANS, f"the turn's trace under {MAX_TURN_SPANS} spans", len(in_trace))
    dangling = [s.name for s in in_trace if s is not turn and s.parent_id not in index]
    check(not dangling, "no span of the turn's trace dangles", dangling)
    named = [(svc, t, sid) for svc, t, sid in _log_records(sink) if svc != PROXY_SERVICE and sid in index]
    astray = [(index[sid].name, t, index[sid].trace_id) for _, t, sid in named if t != index[sid].trace_id]
    check(not astray, "the agent's log records in their span's trace", astray)
    if name in SESSION_ID:
        span_name, key = SESSION_ID[name]
        sessions = {s.attributes.get(key) for s in spans if s.name == span_name and s.service != PROXY_SERVICE}
        check(sessions == {run.session_id}, "the ACP session id on the agent's spans", [sessions, run.session_id])
    check(all(h.get("x-backend-key") == secret for _, h in sink.headers), "the backend header on every export")
    _no_backend_settings(check, environs, secret)
    receivers = {env.get("OTEL_EXPORTER_OTLP_ENDPOINT") for env in environs}
    check(all(e and e.startswith("http://127.0.0.1:") for e in receivers), "the agent exports to the proxy", receivers)
    bodies = [body for _, body in sink.raw] + [body for _, body in list(sink.other)]
    leaks = sorted({c for c in script.canaries() for b in bodies if c.encode() in b})
    check(not leaks, "no content at the backend", leaks)
    reports = {tid: [(s.service, s.name) for s in _reports_of(tid, spans)] for tid in run.tool_call_ids()}
    check(all(len(r) == 1 for r in reports.values()), "each tool call reported once, as execute_tool", reports)
    reporters = {n for r in reports.values() for svc, n in r if svc != PROXY_SERVICE}
    check(reporters <= TOOL_REPORT[name], "by the agent's tool span where it has one", reporters)
    if TOOL_REPORT[name]:  # the proxy made no tool span: what serves a tool call hangs from the agent's span of it
        served = [
            s
            for s in spans
            if s.service == PROXY_SERVICE and "acp.tool_call.id" in s.attributes and s.name != "session/update"
        ]
        pairs = [(s, index.get(s.parent_id or "")) for s in served]
        own = [
            p is not None and p.service != PROXY_SERVICE and s.attributes["acp.tool_call.id"] in p.attributes.values()
            for s, p in pairs
        ]
        check(
            bool(own) and all(own),
            "the proxy's requests serving a tool call under the agent's span of it",
            [(s.name, p.name if p is not None else None) for s, p in pairs],
        )
    check.done()


@pytest.mark.parametrize("name", AGENTS)
async def test_agent_telemetry_off(name: str, tmp_path: Path, model: ModelServer, sink: Sink, script: Script) -> None:
    run, environs, secret = await _proxied(name, False, tmp_path, model, sink, script)
    spans = sink.wait_for(lambda s: len(tools_of(s)) >= 3 and turn_of(s), timeout=60)
    check = Checks()
    check(sink.errors == [], "the backend decoded every export", sink.errors)
    check(len(turn_of(spans)) == 1, "the proxy's turn span", [s.name for s in turn_of(spans)])
    tools = tools_of(spans)
    check(
        sorted(str(s.attributes.get("gen_ai.tool.call.id")) for s in tools) == sorted(run.tool_call_ids()),
        "the proxy's tool spans, one per tool call",
        [s.name for s in tools],
    )
    services = {s.service for s in spans} | _services(sink, "logs") | _services(sink, "metrics")
    check(services == {PROXY_SERVICE}, "nothing of the agent's at the backend", services)
    _no_backend_settings(check, environs, secret)
    check(not [k for env in environs for k in env if k.startswith("OTEL_EXPORTER_")], "no exporter setting at all")
    check.done()


async def test_settings_in_the_agents_command_are_the_agents(
    tmp_path: Path, model: ModelServer, sink: Sink, script: Script
) -> None:
    """Option off, OpenCode given an endpoint in its own command (``env VAR=VALUE opencode acp``): it exports there
    itself, as told; the backend's header, given to the proxy only, is still not in its environment."""
    prefix = ("env", f"OTEL_EXPORTER_OTLP_ENDPOINT={sink.endpoint}")
    _, environs, secret = await _proxied("opencode", False, tmp_path, model, sink, script, prefix)
    sink.wait_for(lambda s: any(x.name == "LLM.run" for x in s), timeout=60)  # its own spans (no AI SDK switch)
    check = Checks()
    check({e.get("OTEL_EXPORTER_OTLP_ENDPOINT") for e in environs} == {sink.endpoint}, "the command's endpoint")
    leaked = [k for env in environs for k, v in env.items() if secret in v]
    check(not leaked, "no backend header in the agent's environment", leaked)
    check.done()


# ---------------------------------------------------------------------- content keys and switches (the witnesses)

# Each agent's content switches in its running process: (variable, value with capture on, value with capture off).
CONTENT_SWITCHES = {
    "gemini": (("GEMINI_TELEMETRY_LOG_PROMPTS", "true", "false"),),
    "qwen": (
        ("QWEN_TELEMETRY_LOG_PROMPTS", "true", "false"),
        ("QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES", "true", "false"),
    ),
    "opencode": (),  # none: the AI SDK's spans record content whatever it is told; the scrubber removes it
}
PROFILE = {"gemini": "gemini-cli", "qwen": "qwen-code", "opencode": "opencode"}


def _carriers(sink: Sink, canary: str) -> set[str]:
    """Where the canary reached the backend in the agent's own telemetry (the proxy's, with capture on, carries it
    too): ``span KEY``, ``span event KEY``, ``log KEY``, ``log body EVENT``."""
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

    found = set()
    for service, body in list(sink.raw):
        if service == PROXY_SERVICE:
            continue
        for scope in ResourceSpans.FromString(body).scope_spans:
            for span in scope.spans:
                found |= {f"span {kv.key}" for kv in span.attributes if canary.encode() in kv.SerializeToString()}
                for event in span.events:
                    found |= {f"span event {kv.key}" for kv in event.attributes if canary in str(kv.value)}
    for path, body in list(sink.other):
        if path.endswith("/v1/logs"):
            for resource in _decode(path, body).resource_logs:
                names = {str(_value(kv.value)) for kv in resource.resource.attributes if kv.key == "service.name"}
                if PROXY_SERVICE in names:
                    continue
                for scope in resource.scope_logs:
                    for record in scope.log_records:
                        found |= {f"log {kv.key}" for kv in record.attributes if canary in str(kv.value)}
                        if canary in str(record.body):
                            name = record.event_name or next(
                                (kv.value.string_value for kv in record.attributes if kv.key == "event.name"), ""
                            )
                            found.add(f"log body {name}")
    return found


@pytest.mark.parametrize("name", ["gemini", "qwen", "opencode"])
async def test_the_agents_content_keys_and_switches(
    name: str, tmp_path: Path, model: ModelServer, sink: Sink, script: Script
) -> None:
    """Gemini CLI's, Qwen Code's and OpenCode's content (the turn's canaries in the prompt, the files and the
    command): with capture on it reaches the backend, under keys the scrubber knows as content for that agent, and
    the agent process has its content switches on; with capture off, off (the scrubber's own checks are
    ``test_agent_telemetry_on``'s: none of it at the backend)."""
    from acp_otel._proxy.agent_content import (
        AGENT_KEYS,
        CONTENT_EVENTS,
        CONVENTION_KEYS,
        CONVENTION_PREFIXES,
        MESSAGE_ONLY_LOGS,
    )

    check = Checks()
    run, environs, _secret = await _proxied(name, True, tmp_path, model, sink, script, capture=True)
    sink.wait_for(lambda s: any(x.name == MODEL_CALL[name] for x in s), timeout=60)
    _wait(sink, lambda: _services(sink, "logs") - {PROXY_SERVICE}, "the agent's logs")
    for variable, on, _off in CONTENT_SWITCHES[name]:
        check({env.get(variable) for env in environs} == {on}, f"{variable}={on} with capture on", environs[0])
    carriers = _carriers(sink, script.canary)
    check(bool(carriers), "the content reaches the backend with capture on", carriers)
    known = CONVENTION_KEYS | AGENT_KEYS[PROFILE[name]]

    def scrubbed(where: str) -> bool:
        key = where.rpartition(" ")[2]
        if where.startswith("log body"):  # an event's body, or a log line cut to its message
            return key in CONTENT_EVENTS or PROFILE[name] in MESSAGE_ONLY_LOGS
        return key in known or key.startswith(CONVENTION_PREFIXES)

    check(all(scrubbed(w) for w in carriers), "every key that carries content is one the scrubber removes", carriers)
    del run
    off_path = tmp_path / "off"
    off_path.mkdir()
    script.write_path.unlink(missing_ok=True)  # the same scripted turn again
    _run, environs, _secret = await _proxied(name, True, off_path, model, sink, script)
    for variable, _on, off in CONTENT_SWITCHES[name]:
        check({env.get(variable) for env in environs} == {off}, f"{variable}={off} with capture off", environs[0])
    check.done()
