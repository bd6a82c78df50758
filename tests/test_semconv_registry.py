"""Every name acp-otel emits, read against the conventions' own registries, not against our memory of them.

A full traced turn runs with editor and agent in this process (the example agent and client of
``acp_otel._demo.examples``, plus a scripted agent for what the example does not send: named tools with
arguments and results, a tool that never completes, thought chunks, usage with cache and reasoning tokens, a
``usage_update`` with cost, a failed extension request), once with content capture off and once on. Every span
name, attribute key, event name and event attribute key, metric name, unit and metric attribute key is
collected, and:

* a name in a namespace the OpenTelemetry conventions own must be defined there and not deprecated: by the
  ``opentelemetry-semantic-conventions`` package's modules (core conventions; its version is pinned below), or,
  for the names the core conventions mark as moved to the GenAI conventions' repository, by
  ``tests/semconv/genai.yaml`` (copied from that repository, with the commits read);
* the ``gen_ai.*`` attributes of an ``invoke_agent`` / ``execute_tool`` span must be ones that operation's span
  defines, and its required ones must be there; a GenAI metric carries the attributes it requires and its unit;
* a GenAI duration is counted once per turn / tool call across the processes that see it;
* every ``acp.*`` name emitted is in a table of the docs, and every ``acp.*`` name in those tables is emitted.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from acp import RequestError
from acp_app import TraceClient, open_session, prompt
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from sdk_versions import SDK_VERSION, sdk_matches
from spans import wait_spans_closed
from test_agent_turns import ScriptAgent, _tool, _tool_update

if not sdk_matches(">=0.9"):  # the examples' imports fail there, before a skip mark could apply
    pytest.skip(
        f"agent-client-protocol {SDK_VERSION}: the examples import acp.schema.FileSystemCapabilities "
        "(0.8 names it FileSystemCapability)",
        allow_module_level=True,
    )

from acp_otel._demo.examples.agent import ExampleAgent
from acp_otel._demo.examples.client import ExampleClient

ROOT = Path(__file__).resolve().parent.parent
GENAI = yaml.safe_load((ROOT / "tests" / "semconv" / "genai.yaml").read_text())
# The release of the core conventions' package whose registry is read (semantic conventions 1.44.0).
SEMCONV_PACKAGE = "opentelemetry-semantic-conventions"
SEMCONV_PINNED = "0.66b2"
# Namespaces the OpenTelemetry conventions own (core, GenAI, MCP).
OWNED = ("gen_ai.", "rpc.", "jsonrpc.", "network.", "server.", "client.", "error.", "session.", "process.", "mcp.")
DOCS = ("spans.md", "metrics.md", "genai.md", "tool-calls.md")
# gen_ai.* attributes set on an operation's span beside those the operation defines, and why.
BESIDE = {
    # A turn reports the agent's thought tokens; the registry defines the name (for inference spans).
    ("invoke_agent", "gen_ai.usage.reasoning.output_tokens"),
    # One query finds a session's tool calls and an agent's tools, as A2A puts GenAI names on every span.
    ("execute_tool", "gen_ai.conversation.id"),
    ("execute_tool", "gen_ai.agent.name"),
}
# Documented acp.* names this in-process v1 run cannot make, and the tests that see them emitted.
NOT_IN_THIS_RUN = {
    "acp.turn.state": "ACP v2 state updates: test_agent_v2.py",
    "acp.connection.id": "remote transports: test_remote_transports.py",
    "acp.spawn": "spawned agents: test_spawn_shutdown.py",
    "acp.cancelled": "cancellation: test_core.py",
    "acp.error.detail": "a handler that raised, with capture: test_core.py",
    "acp.turn.ended_by": "a turn without its answer: test_agent_v2.py",
    "acp.session.update.dropped.count": "events beyond max_events_per_span: test_notification_spans.py",
    "acp.relay.service.name": "the agent's own telemetry forwarded by the proxy: test_agent_telemetry_proxy.py",
    "acp.agent_span.operation.name": "an agent's span the proxy maps: test_agent_span_maps.py",
    **{
        f"acp.usage.last_call.{n}": "an agent that reports its last model call: test_agent_profiles.py"
        for n in (
            "input_tokens",
            "output_tokens",
            "cache_read.input_tokens",
            "cache_write.input_tokens",
            "reasoning.output_tokens",
            "total_tokens",
        )
    },
}


# ------------------------------------------------------------------------------------- the registries


def _constants(module: str) -> Iterator[tuple[str, str | None]]:
    """``(value, deprecation note or None)`` of each ``NAME: Final = "value"`` of a semconv module (the
    deprecation is in the constant's docstring: the package marks no attribute constant otherwise)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    body = ast.parse(Path(spec.origin).read_text()).body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Constant) and type(node.value.value) is str:
            doc = body[i + 1] if i + 1 < len(body) else None
            text = doc.value.value if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) else ""
            text = str(text).strip()
            yield node.value.value, (text[len("Deprecated:") :].strip() if text.startswith("Deprecated:") else None)


def _package_registry(kind: str) -> dict[str, str | None]:
    """Every attribute (``kind='attributes'``) or metric name of the package, with its deprecation note."""
    out: dict[str, str | None] = {}
    for package in (f"opentelemetry.semconv.{kind}", f"opentelemetry.semconv._incubating.{kind}"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations is not None
        for path in sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.py")):
            if path.name != "__init__.py":
                for value, note in _constants(f"{package}.{path.stem}"):
                    out.setdefault(value, note)
    return out


def registry_problem(name: str, kind: str, package: dict[str, str | None]) -> str | None:
    """Why ``name`` (an attribute key or metric name in an owned namespace) is not a current name, or None."""
    genai = GENAI["attributes" if kind == "attributes" else "metrics"]
    if name in genai:
        replacement = (genai[name] or {}).get("deprecated")
        return f"deprecated in the GenAI conventions: use {replacement}" if replacement else None
    if name not in package:
        return "not defined by the conventions"
    note = package[name]
    if note is None:
        return None
    if "semantic-conventions-genai" in note:  # moved: the GenAI repository says what it is now
        return f"moved to the GenAI conventions and not in tests/semconv/genai.yaml ({note})"
    return f"deprecated: {note}"


# ------------------------------------------------------------------------------------------ the run


class NamedToolAgent(ScriptAgent):
    """What the example agent does not send: tool names, arguments and results, usage details, cost."""


SCRIPT = [
    {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "thinking"}},
    {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "echo"}},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "answer"}},
    _tool("t-read", kind="read", rawInput={"path": "/tmp/x"}, _meta={"claudeCode": {"toolName": "Read"}}),
    ("permission", "t-read"),
    _tool_update("t-read", "completed", rawOutput={"lines": 3}, locations=[{"path": "/tmp/x"}]),
    _tool("t-fail", kind="fetch", rawInput={"url": "x"}),
    _tool_update("t-fail", "failed", rawOutput={"error": "unreachable"}),  # a result only on success
    _tool("t-open", kind="execute"),  # never completes: ended with the turn
    {"sessionUpdate": "usage_update", "used": 1000, "size": 200000, "cost": {"amount": 0.25, "currency": "USD"}},
    {"sessionUpdate": "plan", "entries": []},
]
USAGE = {
    "inputTokens": 120,
    "outputTokens": 34,
    "totalTokens": 170,
    "thoughtTokens": 16,
    "cachedReadTokens": 100,
    "cachedWriteTokens": 10,
}


class Seen:
    """Names collected from the run."""

    def __init__(self) -> None:
        self.span_names: set[str] = set()
        self.attributes: set[str] = set()
        self.events: set[str] = set()
        self.metrics: dict[str, str] = {}  # name -> unit
        self.metric_attributes: set[str] = set()
        self.spans: list[Any] = []
        self.points: dict[str, list[Any]] = {}


async def _example_turn(pair: Any, tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("one\ntwo\n")
    p = await pair(ExampleAgent(), ExampleClient())
    await p.client_conn.initialize(
        protocol_version=1,
        client_capabilities={"fs": {"readTextFile": True}, "_meta": {"example.com/workspace": {"buffers": True}}},
        client_info={"name": "example-client", "version": "0.1.0"},
    )
    session = await p.client_conn.new_session(cwd=str(tmp_path), mcp_servers=[])
    await p.client_conn.prompt(session_id=session.session_id, prompt=[{"type": "text", "text": "hi"}])


async def _scripted_turn(pair: Any) -> None:
    p = await pair(NamedToolAgent(SCRIPT, usage=USAGE), TraceClient())
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, "hello")
    with pytest.raises(RequestError):  # -32601 with data: rpc.response.status_code, acp.error.data (capture)
        await p.client_conn.ext_method("test.dev/missing", {"sessionId": session_id})


async def _collect(instrument: Any, exporter: Any, pair: Any, counter: Any, tmp_path: Path, seen: Seen) -> None:
    for capture in (False, True):
        reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[reader])
        instrument(meter_provider=meter_provider, capture_content=capture)
        exporter.clear()
        await _example_turn(pair, tmp_path)
        await _scripted_turn(pair)
        await wait_spans_closed(counter)
        spans = list(exporter.get_finished_spans())
        data = reader.get_metrics_data()
        instrument.off()
        meter_provider.shutdown()
        for span in spans:
            seen.spans.append(span)
            seen.span_names.add(span.name)
            seen.attributes.update(span.attributes or {})
            for event in span.events:
                seen.events.add(event.name)
                seen.attributes.update(event.attributes or {})
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    seen.metrics[metric.name] = metric.unit
                    points = seen.points.setdefault(f"{metric.name} capture={capture}", [])
                    for point in metric.data.data_points:
                        points.append(point)
                        seen.metric_attributes.update(point.attributes or {})


@pytest.fixture
async def seen(instrument: Any, exporter: Any, pair: Any, counter: Any, tmp_path: Path) -> Seen:
    out = Seen()
    await _collect(instrument, exporter, pair, counter, tmp_path, out)
    return out


# ----------------------------------------------------------------------------------------- the docs


def _table_rows() -> Iterator[str]:
    """The table rows of the reference docs, but those of a "Renamed" section (names no longer emitted)."""
    for doc in DOCS:
        heading = ""
        for line in (ROOT / "docs" / doc).read_text().splitlines():
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif line.startswith("|") and heading != "Renamed":
                yield line


def documented_acp_names() -> set[str]:
    """Every ``acp.*`` name in a table row of the reference docs (the registry of our own namespace)."""
    names: set[str] = set()
    for line in _table_rows():
        names.update(re.findall(r"`(acp\.[a-z0-9_.]+)`", line))
    return names


def documented_owned_names() -> set[str]:
    """The names in a namespace the conventions own that the first column of a docs table lists."""
    names: set[str] = set()
    for line in _table_rows():
        first = line.split("|")[1]
        names.update(n for n in re.findall(r"`([a-z_]+\.[a-z0-9_.]+)`", first) if n.startswith(OWNED))
    return names


# ---------------------------------------------------------------------------------------- the tests


def _skip_unless_pinned() -> None:
    installed = importlib.metadata.version(SEMCONV_PACKAGE)
    if installed != SEMCONV_PINNED:
        pytest.skip(f"the registry test reads {SEMCONV_PACKAGE} {SEMCONV_PINNED}; this environment has {installed}")


async def test_owned_names_are_current_in_the_conventions(seen: Seen) -> None:
    _skip_unless_pinned()
    attributes = _package_registry("attributes")
    metrics = _package_registry("metrics")
    problems = []
    for name in sorted(seen.attributes | seen.metric_attributes):
        if name.startswith(OWNED) and (why := registry_problem(name, "attributes", attributes)):
            problems.append(f"attribute {name}: {why}")
    for name in sorted(documented_owned_names()):  # what the docs' tables name (attributes or metrics)
        why = registry_problem(name, "attributes", attributes)
        if why is not None and registry_problem(name, "metrics", metrics) is not None:
            problems.append(f"documented {name}: {why}")
    for name in sorted(seen.metrics):
        if name.startswith(OWNED) and (why := registry_problem(name, "metrics", metrics)):
            problems.append(f"metric {name}: {why}")
        expected = GENAI["metrics"].get(name, {}).get("unit")
        if expected is not None and seen.metrics[name] != expected:
            problems.append(f"metric {name}: unit {seen.metrics[name]!r}, the conventions say {expected!r}")
    for name in sorted(seen.span_names | seen.events):
        first = name.split(" ", 1)[0]
        if first.startswith(OWNED) and "." in first:
            problems.append(f"span or event name {name}: in a namespace the conventions own")
    assert not problems, "\n".join(problems)


async def test_genai_operations_carry_what_the_conventions_define(seen: Seen) -> None:
    problems = set()
    operations = GENAI["operations"]
    for span in seen.spans:
        attributes = dict(span.attributes or {})
        if attributes.get("rpc.system.name") == "jsonrpc" and attributes.get("jsonrpc.protocol.version") != "2.0":
            problems.add(f"{span.name!r}: jsonrpc.protocol.version (Conditionally Required) is not '2.0'")
        operation = attributes.get("gen_ai.operation.name")
        if operation is None:
            continue
        if operation == "execute_tool" and span.status.status_code.name == "ERROR":
            if attributes.get("error.type") != GENAI["tool_error_type"]:
                problems.add(f"failed tool span {span.name!r}: error.type {attributes.get('error.type')!r}")
            if "gen_ai.tool.call.result" in attributes:  # "if any and if execution was successful"
                problems.add(f"failed tool span {span.name!r}: gen_ai.tool.call.result")
        spec = operations[operation]
        for key in attributes:
            if key.startswith("gen_ai.") and key not in spec["attributes"] and (operation, key) not in BESIDE:
                problems.add(f"{operation} span {span.name!r}: {key} is not an attribute of {operation} spans")
        for key in spec["required"]:
            if key not in attributes:
                problems.add(f"{operation} span {span.name!r}: required {key} missing")
        for key in spec.get("recommended", ()):
            if key not in attributes and span.name.split(" ")[0] in ("session/prompt", "invoke_agent"):
                problems.add(f"{operation} span {span.name!r}: recommended {key} missing")
    for label, points in seen.points.items():
        name = label.split(" ")[0]
        for key in GENAI["metrics"].get(name, {}).get("required", ()):
            for point in points:
                if key not in point.attributes:
                    problems.add(f"metric {name}: required {key} missing in {dict(point.attributes)}")
    assert not problems, "\n".join(sorted(problems))


async def test_genai_durations_are_counted_once(seen: Seen) -> None:
    """Editor and agent both see each turn and tool call; the conventions' agent-side metrics count it once."""
    for capture in (False, True):
        turns = sum(p.count for p in seen.points.get(f"gen_ai.invoke_agent.duration capture={capture}", []))
        tools = sum(p.count for p in seen.points.get(f"gen_ai.execute_tool.duration capture={capture}", []))
        assert turns == 2, f"two turns ran, gen_ai.invoke_agent.duration counted {turns}"
        assert tools == 6, f"six tool calls ran, gen_ai.execute_tool.duration counted {tools}"


async def test_acp_names_are_the_docs_tables(seen: Seen) -> None:
    emitted = {
        name
        for name in seen.attributes | seen.metric_attributes | set(seen.metrics) | seen.events | seen.span_names
        if name.startswith("acp.")
    }
    documented = documented_acp_names()
    undocumented = emitted - documented
    assert not undocumented, f"emitted, in no table of docs/{{{','.join(DOCS)}}}: {sorted(undocumented)}"
    never = documented - emitted - set(NOT_IN_THIS_RUN)
    assert not never, (
        f"documented but not emitted by the run (add it to the run or to NOT_IN_THIS_RUN): {sorted(never)}"
    )
    stale = (set(NOT_IN_THIS_RUN) - documented) | (set(NOT_IN_THIS_RUN) & emitted)
    assert not stale, f"NOT_IN_THIS_RUN names no documented name, or one the run emits: {sorted(stale)}"


def test_the_lookup_fails_unknown_and_deprecated_names_with_their_replacement() -> None:
    _skip_unless_pinned()
    attributes, metrics = _package_registry("attributes"), _package_registry("metrics")
    assert registry_problem("gen_ai.tool.name", "attributes", attributes) is None
    assert registry_problem("jsonrpc.protocol.version", "attributes", attributes) is None
    assert registry_problem("gen_ai.invoke_agent.duration", "metrics", metrics) is None
    # Unreleased (renamed on the core conventions' main branch after 1.44.0): not yet a name.
    assert registry_problem("rpc.status_code", "attributes", attributes) == "not defined by the conventions"
    why = registry_problem("gen_ai.usage.cache_creation.input_tokens", "attributes", attributes)
    assert why is not None and "gen_ai.usage.cache_write.input_tokens" in why
    why = registry_problem("rpc.client.duration", "metrics", metrics)
    assert why is not None and "rpc.client.call.duration" in why
    why = registry_problem("gen_ai.system", "attributes", attributes)  # moved, and not a GenAI name we pinned
    assert why is not None and "gen_ai.provider.name" in why
