"""The stack most users run: an OpenTelemetry Collector forwarding traces to Jaeger and metrics to Prometheus.

Run by ``nox -s backends`` only. Real binaries, built from the Go module proxy by ``scripts/build_backends.sh``
(``go_stack.py``), on free loopback ports, the Collector with ``collector-config/otel-collector.yaml`` itself.
Without Go (a user's machine) the tests skip with that reason; under ``CI=true`` a missing Go or a failed build
fails them. The file name does not match pytest's ``test_*.py``: the default test run does not collect it.

Each case exports its traces through a tee of the test's own (``otlp_tee.py``) into the Collector, its metrics
to the Collector directly; what Jaeger returns through its HTTP API is compared span for span with what the tee
kept (Jaeger's warnings with it: its clock-skew adjuster, done again on the spans as sent, must give the same, each
of a span whose timing is not ours), and Prometheus is asked for every metric docs/metrics.md lists, by the name
Prometheus gives it:

* ``acp-otel demo`` (OTLP/HTTP);
* ``acp-otel proxy`` in front of ``examples/agent.py``, driven by an SDK client (OTLP/HTTP, metrics on);
* zero-code: ``opentelemetry-instrument python examples/client.py``, which spawns the example agent traced too
  (OTLP/gRPC, the distro's default, metrics on);
* ``acp-otel proxy`` in front of the tests' usage agent (``tests/peers/trace_agent.py usage``), which reports a
  turn's cost: the one metric the example agent does not produce;
* ``acp-otel proxy --agent-telemetry`` in front of a real agent, Qwen Code (from tests/real_agents/package-lock.json,
  installed as ``nox -s real_agents`` installs it), offline against the scripted model server: its own model-call
  spans must be in the turn's trace, under the turn span. The agent's logs go to the Collector too, which gets a
  logs pipeline to its ``debug`` exporter for them (collector-config has none). Skipped when Qwen Code is not
  installed, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from check_phoenix import CANARIES, PROMPT, clean_env, editor_turn, make_attachment
from go_stack import LOOPBACK, Stack, Unavailable, binaries, http_json
from jaeger_read import SKEW_WARNING, expected_skew, go_duration, trace_problems, warnings_shown
from otlp_tee import GrpcTee, HttpTee, TeeSpan

from acp_otel._proxy.forwarder import RELAY_ATTRIBUTE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
ACP_OTEL = str(BIN / "acp-otel")
OTEL_INSTRUMENT = str(BIN / "opentelemetry-instrument")
METRICS_DOC = ROOT / "docs" / "metrics.md"
TURN, TOOL = "invoke_agent", "execute_tool"
CASES = ["demo", "proxy", "zero-code", "usage", "agent-telemetry"]
# The example agent's turn makes three tool calls; the tests' usage agent none (it reports a cost instead); Qwen
# Code three (reported by its own spans, the proxy's then make none: counted in the case itself).
TOOL_CALLS = {"demo": 3, "proxy": 3, "zero-code": 3, "usage": 0, "agent-telemetry": -1}
REAL_AGENTS = ROOT / "tests" / "real_agents"
QWEN_MODEL_CALL = "qwen-code.llm_request"
COST = "cost=0.25 currency=EUR in=100"


@dataclass
class Case:
    name: str
    sent: list[TeeSpan]
    output: str  # what the program printed (stdout and stderr)

    def traces(self) -> dict[str, list[TeeSpan]]:
        out: dict[str, list[TeeSpan]] = {}
        for span in self.sent:
            out.setdefault(span.trace_id, []).append(span)
        return out


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    try:
        bins = binaries()
    except Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {exc}")
        pytest.skip(str(exc))
    stack = Stack(bins)
    with stack:
        yield stack
    print(f"\nCollector log (tail):\n{stack.log('otelcol')[-1500:]}")
    stack.cleanup()


def _env(**extra: str) -> dict[str, str]:
    return clean_env(
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_LOGS_EXPORTER="none",
        **extra,
    )


def run_demo(stack: Stack) -> Case:
    with HttpTee(f"{stack.collector_http}/v1/traces") as tee:
        done = subprocess.run(
            [ACP_OTEL, "demo"],
            env=_env(OTEL_EXPORTER_OTLP_ENDPOINT=tee.endpoint),
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert tee.errors == [], tee.errors
    (trace_id,) = re.findall(r"^trace id: ([0-9a-f]{32})$", done.stdout, re.MULTILINE)
    sent = tee.snapshot()
    assert {s.trace_id for s in sent} == {trace_id}, "the demo's run is one trace, the one it printed"
    return Case("demo", sent, done.stdout + done.stderr)


def run_proxy(stack: Stack, attachment: Path) -> Case:
    agent = [sys.executable, str(EXAMPLES / "agent.py")]
    with HttpTee(f"{stack.collector_http}/v1/traces") as tee:
        env = _env(
            OTEL_EXPORTER_OTLP_ENDPOINT=tee.endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"{stack.collector_http}/v1/metrics",
        )
        _message, left, stderr = asyncio.run(editor_turn([ACP_OTEL, "proxy", "--", *agent], env, attachment))
    assert left.returncode == 0, stderr
    assert tee.errors == [], tee.errors
    return Case("proxy", tee.snapshot(), stderr)


def run_zero_code(stack: Stack, attachment: Path) -> Case:
    with GrpcTee(stack.collector_grpc) as tee:
        env = _env(
            OTEL_EXPORTER_OTLP_ENDPOINT=tee.endpoint,
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"http://{stack.collector_grpc}",
            OTEL_SERVICE_NAME="acp-example-client",
        )
        done = subprocess.run(
            [
                OTEL_INSTRUMENT,
                sys.executable,
                str(EXAMPLES / "client.py"),
                "--prompt",
                PROMPT,
                "--file",
                str(attachment),
            ],
            env=env,
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert tee.errors == [], tee.errors
    return Case("zero-code", tee.snapshot(), done.stderr)


def run_usage(stack: Stack) -> Case:
    sys.path[:0] = [str(ROOT / "tests" / "support"), str(ROOT / "tests" / "proxy_peers")]
    from acp_app import initialize, open_session, prompt
    from harness import PY_AGENT, proxied_client

    async def turn(env: dict[str, str]) -> Any:
        async with proxied_client([*PY_AGENT, "usage"], env) as run:
            await initialize(run.conn)
            session_id = await open_session(run.conn)
            result = await prompt(run.conn, session_id, COST)
            assert result.stop_reason == "end_turn"
        return run

    with HttpTee(f"{stack.collector_http}/v1/traces") as tee:
        env = _env(
            OTEL_EXPORTER_OTLP_ENDPOINT=tee.endpoint,
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"{stack.collector_http}/v1/metrics",
        )
        run = asyncio.run(turn(env))
    assert run.returncode == 0, run.stderr
    assert tee.errors == [], tee.errors
    return Case("usage", tee.snapshot(), run.stderr)


def run_agent_telemetry(stack: Stack, tmp_path: Path) -> Case:
    """One scripted turn of Qwen Code through ``acp-otel proxy --agent-telemetry`` (as tests/real_agents does)."""
    if not (REAL_AGENTS / "node_modules" / "@qwen-code" / "qwen-code").is_dir():
        reason = "Qwen Code is not installed (npm install --no-save in tests/real_agents)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    sys.path.insert(0, str(REAL_AGENTS))
    import agents
    from editor import run_turn
    from model_server import ModelServer, Script
    from test_real_agents import PROXY_ARGS, make_agent

    script = Script(tmp_path / "workspace", f"CANARY{uuid.uuid4().hex[:12]}")
    script.prepare()
    with ModelServer(script) as model, HttpTee(f"{stack.collector_http}/v1/traces") as tee:
        agent = make_agent("qwen", tmp_path, model, "on")
        env = {
            **agent.env,
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": stack.collector_http,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{tee.endpoint}/v1/traces",
        }
        try:
            run = asyncio.run(
                run_turn(
                    agent.command,
                    env,
                    script.workspace,
                    f"Read the file, write another and run a command. {script.canary}-PROMPT",
                    proxy_args=[*PROXY_ARGS, "--agent-telemetry"],
                    before_prompt=model.begin_turn,
                    grace=agent.grace,
                    timeout=300,
                    tap=False,
                )
            )
        finally:
            agents.end_leftovers(tmp_path / "home-on")
    assert run.result is not None and run.result.stop_reason == "end_turn", run.stderr[-3000:]
    assert len(run.tool_call_ids()) == 3, run.tool_call_ids()
    assert tee.errors == [], tee.errors
    return Case("agent-telemetry", tee.snapshot(), run.stderr)


def wait_for_jaeger(stack: Stack, case: Case, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
    """Jaeger's view of each trace the case sent, once it holds at least as many spans as were sent."""
    deadline = time.monotonic() + timeout
    shown: dict[str, dict[str, Any]] = {}
    for trace_id, spans in case.traces().items():
        while True:
            trace = stack.trace(trace_id)
            if trace is not None and len(trace["spans"]) >= len(spans):
                shown[trace_id] = trace
                break
            if time.monotonic() > deadline:
                got = len(trace["spans"]) if trace else 0
                raise AssertionError(f"{case.name}: Jaeger has {got} of the {len(spans)} spans of trace {trace_id}")
            time.sleep(0.5)
    return shown


@pytest.fixture(scope="module")
def runs(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, dict[str, dict[str, Any]]]]:
    """Every case once (what was sent, and what Jaeger returns for each of its traces)."""
    out = {}
    for name in CASES:
        attachment = make_attachment(tmp_path_factory.mktemp(name))
        started = time.monotonic()
        if name == "demo":
            case = run_demo(stack)
        elif name == "proxy":
            case = run_proxy(stack, attachment)
        elif name == "zero-code":
            case = run_zero_code(stack, attachment)
        elif name == "usage":
            case = run_usage(stack)
        else:
            case = run_agent_telemetry(stack, tmp_path_factory.mktemp("qwen"))
        assert case.sent, f"{name}: nothing was exported"
        out[name] = (case, wait_for_jaeger(stack, case))
        print(f"\n{name}: {len(case.sent)} spans, in Jaeger after {time.monotonic() - started:.1f} s")
    return out


# ---------------------------------------------------------------------------------------------- Jaeger


def test_every_listener_on_loopback(stack: Stack) -> None:
    sockets = stack.listening()
    assert len(sockets) >= 10, sockets  # Jaeger 6, the Collector 3, Prometheus 1
    assert [s for s in sockets if s[0] != LOOPBACK] == [], sockets


@pytest.mark.parametrize("name", CASES)
def test_every_span_in_jaeger_once_as_sent(runs: dict[str, Any], name: str) -> None:
    """Name, kind, parent, status, attributes (tags), events (logs), links (references), service."""
    case, shown = runs[name]
    problems = [p for trace_id, spans in case.traces().items() for p in trace_problems(shown[trace_id], spans)]
    assert problems == []


def skew_report(case: Case, shown: dict[str, Any]) -> list[str]:
    """Every Jaeger warning on the case's traces, and every one it should have given and did not, with both spans."""
    out = []
    for trace_id, spans in case.traces().items():
        own, per_span = warnings_shown(shown[trace_id])
        out += [f"trace {trace_id}: {w}" for w in own]
        expected = expected_skew(spans)
        by_id = {s.span_id: s for s in spans}
        for span_id in sorted(per_span.keys() | expected.keys()):
            span = by_id.get(span_id)
            parent = by_id.get(span.parent_id or "") if span else None
            want = [SKEW_WARNING + go_duration(expected[span_id])] if span_id in expected else []
            sent = (
                f"{span.name} {span.kind} of {span.resource.get('service.name')} "
                f"[{span.start_ns}, {span.end_ns}] under "
                + (
                    f"{parent.name} {parent.kind} of {parent.resource.get('service.name')} "
                    f"[{parent.start_ns}, {parent.end_ns}]"
                    if parent
                    else "nothing"
                )
                if span
                else "not sent"
            )
            out.append(f"{span_id}: Jaeger {per_span.get(span_id, [])}, expected {want}: {sent}")
    return out


def explained(span: TeeSpan, parent: TeeSpan) -> str | None:
    """Why a span sent may outlast its parent, or None: the kinds of span whose timing is not ours to make fit."""
    service, parent_service = span.resource.get("service.name"), parent.resource.get("service.name")
    if span.kind == "CONSUMER" and parent.kind == "PRODUCER" and service != parent_service:
        return "another process handling a notification: a consumer may outlive the producer that sent it"
    if RELAY_ATTRIBUTE in span.resource:  # the agent's own span, relayed by the proxy (--agent-telemetry)
        if RELAY_ATTRIBUTE in parent.resource:
            return "the agent's own span under its own parent: both timed by the agent"
        if parent.start_ns <= span.start_ns <= parent.end_ns:
            return "the agent's own span, hung under the proxy's span it started in, ends when the agent ends it"
    return None


# The cases whose traces may carry clock-skew warnings, and only of explained spans; every other case none at all.
MAY_SKEW = {"demo", "zero-code", "agent-telemetry"}


@pytest.mark.parametrize("name", CASES)
def test_no_warnings_but_clock_skew_of_spans_that_do_not_fit_their_parent(runs: dict[str, Any], name: str) -> None:
    """Jaeger warns exactly of the spans that, as sent, do not fit inside their parent (its clock-skew adjuster run
    on what the tee kept, delta and all), and of nothing else (unknown parents, duplicate ids); each such span is
    of a kind whose timing is not ours (:func:`explained`), and only in the cases of ``MAY_SKEW``."""
    case, shown = runs[name]
    problems = []
    for trace_id, spans in case.traces().items():
        own, per_span = warnings_shown(shown[trace_id])
        problems += [f"trace {trace_id}: {w}" for w in own]
        expected = expected_skew(spans)
        by_id = {s.span_id: s for s in spans}
        for span_id in per_span.keys() | expected.keys():
            want = [SKEW_WARNING + go_duration(expected[span_id])] if span_id in expected else []
            if per_span.get(span_id, []) != want:
                problems.append(
                    f"{span_id}: Jaeger warns {per_span.get(span_id)}, its adjuster on what was sent {want}"
                )
            elif want:
                span = by_id[span_id]
                why = explained(span, by_id[span.parent_id or ""]) if name in MAY_SKEW else None
                if why is None:
                    problems.append(f"{span.name} ({span_id}) does not fit inside its parent: {want[0]}")
    assert problems == [], "\n".join([*problems, "all of them:", *skew_report(case, shown)])


@pytest.mark.parametrize("name", CASES)
def test_one_trace_per_turn(runs: dict[str, Any], name: str) -> None:
    """The turn (each side's turn span) and its three tool calls are in one trace, and Jaeger holds it whole."""
    case, shown = runs[name]
    turns = [s for s in case.sent if s.attributes.get("gen_ai.operation.name") == TURN]
    tools = [s for s in case.sent if s.attributes.get("gen_ai.operation.name") == TOOL]
    if TOOL_CALLS[name] >= 0:
        assert turns and len(tools) == TOOL_CALLS[name], [s.name for s in case.sent]
    (trace_id,) = {s.trace_id for s in turns + tools}
    held = {s["spanID"] for s in shown[trace_id]["spans"]}
    assert {s.span_id for s in turns + tools} <= held
    # and the parents all resolve inside the trace (Jaeger would warn about an unknown parent otherwise)
    assert all(s.parent_id is None or s.parent_id in held for s in case.traces()[trace_id])


def test_agent_spans_in_the_turn_trace(runs: dict[str, Any]) -> None:
    """With --agent-telemetry, Qwen Code's model calls are in Jaeger in the turn's trace, under the turn span."""
    if "agent-telemetry" not in runs:
        pytest.skip("no agent-telemetry case")
    case, shown = runs["agent-telemetry"]
    (turn,) = [
        s for s in case.sent if s.attributes.get("gen_ai.operation.name") == TURN and s.name.startswith("session")
    ]
    held = {s["spanID"]: s for s in shown[turn.trace_id]["spans"]}
    calls = [s for s in held.values() if s["operationName"] == QWEN_MODEL_CALL]
    assert calls, sorted({s["operationName"] for s in held.values()})
    processes = shown[turn.trace_id]["processes"]
    assert {processes[s["processID"]]["serviceName"] for s in calls} != {turn.resource.get("service.name")}

    def under_turn(span: dict[str, Any]) -> bool:
        while True:
            parents = [r["spanID"] for r in span.get("references") or [] if r["refType"] == "CHILD_OF"]
            if not parents or parents[0] not in held:
                return False
            if parents[0] == turn.span_id:
                return True
            span = held[parents[0]]

    assert all(under_turn(s) for s in calls)


def _ids_and_content(case: Case) -> set[str]:
    """The run's ids (session, tool call, request, trace, span) and its content canaries."""
    found = set(CANARIES)
    for span in case.sent:
        found |= {span.trace_id, span.span_id}
        for key, value in span.attributes.items():
            if key.endswith(".id") and len(str(value)) >= 4:
                found.add(str(value))
    return found


@pytest.mark.parametrize("name", CASES)
def test_services_and_operations(stack: Stack, runs: dict[str, Any], name: str) -> None:
    """Each service from the resource is listed; its operations are the span names sent, none with an id in it."""
    case, _shown = runs[name]
    services = set(http_json(f"{stack.query_url}/api/services")["data"])
    sent_services = {str(s.resource.get("service.name")) for s in case.sent}
    assert sent_services <= services, (sent_services, services)
    forbidden = _ids_and_content(case)
    for service in sent_services:
        query = urllib.parse.urlencode({"service": service})
        operations = {o["name"] for o in http_json(f"{stack.query_url}/api/operations?{query}")["data"]}
        assert {s.name for s in case.sent if s.resource.get("service.name") == service} <= operations
        leaked = [(op, f) for op in operations for f in forbidden if f in op]
        assert leaked == [], leaked


def test_exit_lines_say_no_loss(runs: dict[str, Any]) -> None:
    demo = runs["demo"][0]
    assert "trace id: " in demo.output and "warning" not in demo.output.lower(), demo.output
    for proxied in (runs["proxy"][0], runs["usage"][0]):
        assert "acp-otel proxy:" not in proxied.output, proxied.output  # its exit line appears only on a loss


def _total(counters: dict[str, float], name: str, **labels: str) -> float:
    return sum(
        v
        for k, v in counters.items()
        if k.split("{")[0] == name and all(f'{key}="{val}"' in k for key, val in labels.items())
    )


def test_collector_refused_and_dropped_nothing(stack: Stack, runs: dict[str, Any]) -> None:
    """The Collector's and Jaeger's own counters: every span accepted, sent to Jaeger once (by the one exporter
    to it) and taken by Jaeger once; none refused, dropped or failed."""
    sent = sum(len(case.sent) for case, _ in runs.values())
    collector, jaeger = stack.collector_counters(), stack.jaeger_counters()
    assert _total(collector, "otelcol_receiver_accepted_spans") == sent, collector
    exporters = {
        re.search(r'exporter="([^"]+)"', k).group(1): v  # type: ignore[union-attr]
        for k, v in collector.items()
        if k.startswith("otelcol_exporter_sent_spans{")
    }
    assert {e: v for e, v in exporters.items() if e != "debug"} == {"otlp/jaeger": sent}, exporters
    assert _total(jaeger, "otelcol_receiver_accepted_spans") == sent, jaeger
    for counters in (collector, jaeger):
        bad = {k: v for k, v in counters.items() if re.search(r"refused|dropped|failed", k.split("{")[0]) and v}
        assert bad == {}


# ---------------------------------------------------------------------------------------------- Prometheus


def documented_metrics() -> dict[str, tuple[str, set[str]]]:
    """docs/metrics.md: each metric -> (its Prometheus name, the labels documented for it)."""
    text = METRICS_DOC.read_text(encoding="utf-8")
    instruments = text.split("## Instruments", 1)[1].split("\n## ", 1)[0]
    attributes: dict[str, set[str]] = {}
    previous: set[str] = set()
    for row in re.findall(r"^\| (`.*)$", instruments, re.MULTILINE):
        cells = [c.strip() for c in row.split(" | ")]
        names = re.findall(r"`([a-z_.]+)`", cells[0])
        if cells[2] == "as above":
            labels = previous
        elif cells[2].startswith("as `"):
            labels = attributes[re.findall(r"`([a-z_.]+)`", cells[2])[0]]
        else:
            labels = {n.split(" = ")[0] for n in re.findall(r"`([a-z_.]+(?: = [a-z_]+)?)`", cells[2])}
        for name in names:
            attributes[name] = labels
        previous = labels
    prometheus = text.split("## In Prometheus", 1)[1].split("\n## ", 1)[0]
    translated = dict(re.findall(r"^\| `([a-z_.]+)` \| `([a-z_]+)` \|", prometheus, re.MULTILINE))
    assert set(translated) == set(attributes), "docs/metrics.md: every instrument has its Prometheus name"
    return {otel: (translated[otel], {a.replace(".", "_") for a in labels}) for otel, labels in attributes.items()}


# Labels Prometheus adds itself: the series' job and instance (service.name / service.instance.id), the
# histogram bucket, the instrumentation scope (not seen with Prometheus 3.16's defaults, allowed all the same).
PROMETHEUS_LABELS = {
    "__name__",
    "job",
    "instance",
    "le",
    "otel_scope_name",
    "otel_scope_version",
    "otel_scope_schema_url",
}
# Documented labels that are only there sometimes (on failures; a tool call nothing names).
OPTIONAL_LABELS = {"error_type", "gen_ai_tool_name"}


def test_every_documented_metric_in_prometheus(stack: Stack, runs: dict[str, Any]) -> None:
    metrics = documented_metrics()
    expected = metrics
    deadline = time.monotonic() + 60
    while True:
        series = {otel: stack.prometheus_series(_series(name)) for otel, (name, _) in expected.items()}
        missing = sorted(otel for otel, found in series.items() if not found)
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert missing == [], f"not in Prometheus under their documented names: {missing}"
    for otel, found in series.items():
        labels = expected[otel][1]
        for entry in found:
            names = set(entry)
            assert names - labels - PROMETHEUS_LABELS == set(), (otel, entry)
            assert labels - OPTIONAL_LABELS <= names, (otel, entry)
            assert not [n for n in names if n.endswith("_id")], (otel, entry)


def _series(prometheus_name: str) -> str:
    """The series to look up: a histogram's ``_count``, a counter as it is."""
    return prometheus_name if prometheus_name.endswith("_total") else f"{prometheus_name}_count"
