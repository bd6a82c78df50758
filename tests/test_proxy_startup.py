"""The proxy's start-up: the agent first, the first messages relayed before the SDK is ready and traced as
always; what ``-v`` says at start; every exported signal in the exit line; metrics without traces.

Real processes: ``acp-otel proxy`` in front of the tests' agent (traced with acp-otel, exporting to the same
loopback receiver), an editor writing raw lines. A slow SDK is made by a test-only ``sitecustomize``
(``tests/proxy_peers/startup_hooks``) whose import of ``opentelemetry.sdk.trace`` waits for a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from acp_app import open_session
from harness import PEERS, PROXY, PY_AGENT, RAW_PEER, base_env, proxied_client
from otlp_sink import OtlpSink, Span, closed_port

from acp_otel import cli

HOOKS = str(PEERS / "startup_hooks")
EDITOR_TRACE = "0af7651916cd43dd8448eb211c80319c"
INIT_PARENT, NEW_PARENT = "b7ad6b7169203331", "c8be7c827a314442"


def _hooked_env(**extra: str) -> dict[str, str]:
    env = base_env(**extra)
    env["PYTHONPATH"] = os.pathsep.join([HOOKS, env["PYTHONPATH"]])
    return env


def _line(request_id: int, method: str, params: str, parent: str | None) -> bytes:
    meta = f',"_meta":{{"traceparent":"00-{EDITOR_TRACE}-{parent}-01"}}' if parent else ""
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"{method}","params":{{{params}{meta}}}}}\n'.encode()


def _answer(proc: subprocess.Popen[bytes], timeout_s: float = 60) -> bytes:
    """The proxy's next line on stdout; fails (no hang) if none comes."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, "no answer from the agent through the proxy"
    return proc.stdout.readline()


def _wait_for_file(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def _the(spans: list[Span], name: str, kind: str, service: str) -> Span:
    found = [s for s in spans if s.name == name and s.kind == kind and s.service == service]
    assert len(found) == 1, [(s.service, s.name, s.kind) for s in spans]
    return found[0]


# With this setting (the default value, written out) the proxy's early relay stands aside: every line goes
# through the engine, imported at once, as it did before lines were relayed without it.
ENGINE_FROM_THE_START = {"OTEL_PYTHON_ACP_INJECT": "true"}


def _initialize_and_new_session(
    tmp_path: Path, gated: bool, traced_editor: bool = True, **extra_env: str
) -> tuple[dict[str, Span], dict[str, tuple[int, int]], int]:
    """``initialize`` and, right after its answer, ``session/new``, from an editor (traced or not) through the
    proxy to a traced agent. With ``gated`` the engine's import (which starts once the agent has answered) is
    held until both are answered, so both are relayed without it, then the SDK's until the engine is ready. The
    four spans; when each request was sent and answered; when the SDK was let go."""
    sdk_gate, engine_gate = tmp_path / f"sdk-{gated}-{traced_editor}", tmp_path / f"engine-{gated}-{traced_editor}"
    with OtlpSink() as sink:
        extra = (
            {"ACP_OTEL_TEST_SDK_GATE": str(sdk_gate), "ACP_OTEL_TEST_ENGINE_GATE": str(engine_gate)} if gated else {}
        )
        env = _hooked_env(**sink.env(), ACP_OTEL_TEST_SPANS="otlp", **extra, **extra_env)
        command = [
            *PROXY,
            "--flush-timeout",
            "30",
            "--service-name",
            "proxy",
            "--",
            *sink.for_agent(*PY_AGENT, "trace"),
        ]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        assert proc.stdin is not None
        opened = 0
        try:
            times: dict[str, tuple[int, int]] = {}
            sent = time.time_ns()
            init_parent = INIT_PARENT if traced_editor else None
            proc.stdin.write(_line(0, "initialize", '"protocolVersion":1,"clientCapabilities":{}', init_parent))
            proc.stdin.flush()
            assert b'"result"' in _answer(proc)
            times["initialize"] = (sent, time.time_ns())
            new_parent = NEW_PARENT if traced_editor else None
            sent = time.time_ns()
            proc.stdin.write(_line(1, "session/new", f'"cwd":"{tmp_path}","mcpServers":[]', new_parent))
            proc.stdin.flush()
            assert b'"sessionId"' in _answer(proc)
            times["session/new"] = (sent, time.time_ns())
            if gated:  # the engine's import started once the agent had answered, and is held
                _wait_for_file(Path(f"{engine_gate}.waiting"))
                assert not engine_gate.exists()
                engine_gate.touch()
                _wait_for_file(Path(f"{sdk_gate}.waiting"))  # the set-up is at the SDK's import, still waiting
                assert not sdk_gate.exists()
                opened = time.time_ns()
                sdk_gate.touch()
            proc.stdin.close()
            assert proc.wait(60) == 0
        finally:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
        keys = [
            ("initialize", "CLIENT", "proxy"),
            ("session/new", "CLIENT", "proxy"),
            ("initialize", "SERVER", "test-agent"),
            ("session/new", "SERVER", "test-agent"),
        ]
        spans = sink.wait_for(lambda s: all(any((x.name, x.kind, x.service) == k for x in s) for k in keys))
    return {f"{k[0]} {k[1]}": _the(spans, *k) for k in keys}, times, opened


@pytest.mark.parametrize("traced_editor", [True, False], ids=["traced-editor", "untraced-editor"])
def test_first_messages_are_relayed_before_the_engine_and_the_sdk_and_traced_as_always(
    tmp_path: Path, traced_editor: bool
) -> None:
    """``initialize`` and ``session/new`` (sent right after the answer) relayed with the engine's import held,
    the SDK's held until the engine is ready: the spans, their attributes and links (editor -> proxy -> agent)
    are those of a run with the engine from the start and no wait, with the times they really had."""
    plain, _, _ = _initialize_and_new_session(tmp_path, False, traced_editor, **ENGINE_FROM_THE_START)
    early, times, opened = _initialize_and_new_session(tmp_path, True, traced_editor)
    for spans in (plain, early):
        for method, parent in (("initialize", INIT_PARENT), ("session/new", NEW_PARENT)):
            proxy, agent = spans[f"{method} CLIENT"], spans[f"{method} SERVER"]
            assert proxy.trace_id == agent.trace_id
            if traced_editor:
                assert proxy.trace_id == EDITOR_TRACE
                assert proxy.parent_id == parent  # the editor's span
            else:
                assert not proxy.parent_id  # a root
            assert agent.parent_id == proxy.span_id  # the context the proxy wrote into the forwarded message
            assert proxy.status == "UNSET"
    for key in ("initialize CLIENT", "session/new CLIENT"):
        assert early[key].attributes.keys() == plain[key].attributes.keys()
        ignored = {"acp.session.id"}  # the agent makes a new one per run
        assert {k: v for k, v in early[key].attributes.items() if k not in ignored} == {
            k: v for k, v in plain[key].attributes.items() if k not in ignored
        }
        # Made once the engine was imported (after both answers), with the times they really had: started
        # once the editor had sent the request, ended before the editor had the answer.
        sent, answered = times[key.split()[0]]
        assert sent <= early[key].start_ns < early[key].end_ns <= answered < opened


def test_the_agent_is_started_before_anything_heavy_is_imported(tmp_path: Path) -> None:
    """At the moment the proxy starts its agent, neither OpenTelemetry nor the engine, the exporters or the demo
    is imported, nor argparse for ``proxy -- CMD`` (the modules loaded are listed by an audit hook on the first
    ``subprocess.Popen``)."""
    modules = tmp_path / "modules"
    env = _hooked_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}", ACP_OTEL_TEST_SPAWN_MODULES=str(modules)
    )
    done = subprocess.run([*PROXY, "--", "true"], input=b"", capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = modules.read_text().split()
    assert "acp_otel._proxy.process" in loaded  # the hook saw the proxy's own spawn
    heavy = ("opentelemetry", "acp_otel._demo", "acp_otel._engine", "acp_otel._proxy.telemetry", "google", "wrapt")
    assert [m for m in loaded if m.startswith(heavy)] == []
    assert "argparse" not in loaded  # `proxy -- CMD`: no parser built


@pytest.mark.parametrize(
    "argv", [["--", "agent"], ["--", "node", "x.js", "--acp", "-v"], ["--", "--help"], ["--", "--", "x"]]
)
@pytest.mark.parametrize("debug", ["", "true"])
def test_proxy_dash_dash_cmd_is_read_as_the_parser_reads_it(argv: list[str], debug: str) -> None:
    from acp_otel._proxy import options

    environ = {options.ENV_DEBUG: debug}
    plain = options.plain_command(argv, environ)
    assert plain is not None
    parsed = options.options_from_args(cli._proxy_parser().parse_args(argv), environ)
    assert {k: getattr(plain, k) for k in plain.__slots__} == {k: getattr(parsed, k) for k in parsed.__slots__}
    assert [options.plain_command(a, environ) for a in (["--"], [], ["-v", "--", "x"], ["x", "--", "y"])] == [None] * 4


HOLDING_AGENT = """
import os, sys, time
record, go = sys.argv[1:3]
line = sys.stdin.buffer.readline()
with open(record + ".tmp", "wb") as f:
    f.write(line)
os.rename(record + ".tmp", record)
while not os.path.exists(go):
    time.sleep(0.01)
sys.stdout.buffer.write(b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}\\n')
sys.stdout.flush()
sys.stdin.buffer.read()
"""


def test_nothing_heavy_is_imported_before_the_agent_answers_initialize(tmp_path: Path) -> None:
    """While the agent has the editor's ``initialize`` and has not answered (its start), the proxy has imported
    neither OpenTelemetry nor the engine; the forwarded ``initialize`` carries the proxy's trace context."""
    record, go, modules = tmp_path / "initialize", tmp_path / "go", tmp_path / "modules"
    env = _hooked_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}", ACP_OTEL_TEST_MODULES_ON=str(modules)
    )
    agent = [sys.executable, "-c", HOLDING_AGENT, str(record), str(go)]
    proc = subprocess.Popen([*PROXY, "--", *agent], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None
    try:
        proc.stdin.write(_line(0, "initialize", '"protocolVersion":1,"clientCapabilities":{}', None))
        proc.stdin.flush()
        _wait_for_file(record)
        Path(f"{modules}.dump").touch()
        _wait_for_file(modules)
        go.touch()
        assert b'"result"' in _answer(proc)
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()
    loaded = modules.read_text().split()
    assert "acp_otel._proxy.early" in loaded  # what relayed initialize
    # The "opentelemetry" namespace package (no code) is imported to find the API's files (early.random_flag).
    heavy = ("opentelemetry.", "acp_otel._engine", "acp_otel._proxy.deferred", "acp_otel._proxy.telemetry", "logging")
    assert [m for m in loaded if m.startswith(heavy)] == []
    forwarded = json.loads(record.read_bytes())
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[13]", forwarded["params"]["_meta"]["traceparent"])


def test_an_agent_that_exits_before_the_engine_is_ready_has_all_its_output_relayed(tmp_path: Path) -> None:
    """The engine's import held for ever, the agent writes and exits at once: every byte still reaches the
    editor (untraced, once the flush bound is spent), the agent's status is passed on, one line says why."""
    payload = b"".join(b'{"jsonrpc":"2.0","method":"n","params":{"i":%d}}\n' % i for i in range(200)) + b"tail"
    send = tmp_path / "send"
    send.write_bytes(payload)
    env = _hooked_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        OTEL_METRICS_EXPORTER="none",
        ACP_OTEL_TEST_SDK_GATE=str(tmp_path / "never"),
        ACP_OTEL_TEST_GATED_MODULE="acp_otel._engine",
    )
    agent = [*RAW_PEER, str(tmp_path / "rec"), str(send), "--exit", "3"]
    done = subprocess.run(
        [*PROXY, "--flush-timeout", "0.5", "--", *agent], input=b"", capture_output=True, env=env, timeout=60
    )
    assert done.stdout == payload
    assert done.returncode == 3
    assert done.stderr.decode().splitlines() == [
        "acp-otel proxy: telemetry: not set up after 0.5 s (--flush-timeout); nothing exported"
    ]


async def test_metrics_a_backend_refuses_are_in_the_exit_line() -> None:
    """A backend that takes spans and answers 405 to metrics (as a traces-only one does): one exit line says so."""
    with OtlpSink(metrics_status=405) as sink:
        env = base_env(**{**sink.env(), "OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "100"})
        async with proxied_client(PY_AGENT, env, ["--flush-timeout", "10"]) as run:
            await open_session(run.conn)
        assert run.returncode == 0
        assert any(s.name == "session/new" for s in sink.spans)  # the spans did arrive
    lines = [line for line in run.stderr.splitlines() if line.startswith("acp-otel proxy:")]
    assert len(lines) == 1, run.stderr
    assert "metrics not exported" in lines[0] and f"127.0.0.1:{sink.port}/v1/metrics" in lines[0], lines[0]
    assert "HTTP 405" in lines[0] and "OTEL_METRICS_EXPORTER=none" in lines[0], lines[0]


async def test_metrics_without_traces() -> None:
    """``OTEL_TRACES_EXPORTER=none`` leaves the proxy's metrics on (here on stderr, never on stdout)."""
    env = base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="console", OTEL_METRIC_EXPORT_INTERVAL="100")
    async with proxied_client(PY_AGENT, env) as run:
        await open_session(run.conn)  # the SDK client reads stdout: anything but the protocol would break it
    assert run.returncode == 0
    assert '"name": "acp.client.operation.duration"' in run.stderr, run.stderr[-2000:]


async def test_a_bad_metrics_setting_is_reported_with_traces_off() -> None:
    env = base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="bogus")
    async with proxied_client(PY_AGENT, env) as run:
        await open_session(run.conn)
    assert run.returncode == 0
    lines = [line for line in run.stderr.splitlines() if line.startswith("acp-otel proxy:")]
    assert len(lines) == 1 and "bogus" in lines[0] and "OTEL_METRICS_EXPORTER" in lines[0], run.stderr


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_verbose_says_where_telemetry_goes_at_start(protocol: str) -> None:
    """``-v``: one line at start with each signal's endpoint and protocol and the service name settled on."""
    port = closed_port()
    env = base_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_METRICS_EXPORTER="none",
        OTEL_SERVICE_NAME="from-env",
    )
    done = subprocess.run(
        [*PROXY, "-v", "--flush-timeout", "30", "--", "true"], input=b"", capture_output=True, env=env, timeout=60
    )
    assert done.returncode == 0 and done.stdout == b""
    lines = [line for line in done.stderr.decode().splitlines() if line.startswith("acp-otel proxy: exporting ")]
    assert len(lines) == 1, done.stderr
    path = "/v1/traces" if protocol == "http/protobuf" else ""
    expected = f"traces to http://127.0.0.1:{port}{path} ({protocol}); metrics off; service.name from-env"
    assert lines[0] == f"acp-otel proxy: exporting {expected}"


def test_help_says_the_environment_names_the_service_first(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        cli.main(["proxy", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    service_help = text[text.rindex("--service-name NAME") :]  # the option, not the usage line
    assert re.match(r"--service-name NAME [^-]*OTEL_SERVICE_NAME", service_help), service_help[:300]


# ------------------------------------------------------------------ early spans and records, in process

SAMPLERS = [
    {},
    {"OTEL_TRACES_SAMPLER": "always_on"},
    {"OTEL_TRACES_SAMPLER": "always_off"},
    {"OTEL_TRACES_SAMPLER": "parentbased_always_off"},
    {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"},
    {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.3"},
    {"OTEL_TRACES_SAMPLER": "TraceIdRatio", "OTEL_TRACES_SAMPLER_ARG": "not a number"},
    {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "7"},
]


@pytest.mark.parametrize("env", SAMPLERS, ids=lambda e: "-".join(e.values()) or "default")
def test_early_span_contexts_are_what_the_sdk_makes(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """For each built-in sampler and kind of parent (none, remote sampled or not, with or without the random
    trace id flag, an early local span): the context an early span forwards is the one the SDK gives the span
    recorded for it (ids, flags, trace state), and it is sampled exactly when the SDK samples it."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    from acp_otel._proxy import deferred
    from acp_otel._proxy.telemetry import ReplayIds

    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    decide = deferred.early_sampler()
    assert decide is not None
    ids = ReplayIds()
    try:
        real = TracerProvider(shutdown_on_exit=False, id_generator=ids).get_tracer("t")
    except ValueError:  # e.g. 1.27: the ratio's range checked outside the fallback the newer releases have
        pytest.skip("this SDK release refuses a sampler ratio outside [0, 1] (newer ones use 1.0): no SDK to compare")
    state = TraceState([("vendor", "v1")])
    parents: list[Any] = [None]
    for flags in (0, 1, 2, 3):
        for trace_id in (0x0AF7651916CD43DD8448EB211C80319C, 0x0AF7651916CD43DDF448EB211C80319C):
            remote = SpanContext(trace_id, 0xB7AD6B7169203331, True, TraceFlags(flags), state)
            parents.append(trace.set_span_in_context(NonRecordingSpan(remote)))
    early_tracer = deferred.DeferredTracer(decide)
    for _ in range(20):  # roots with random trace ids, for the ratio samplers
        parents.append(None)
    local = early_tracer.start_span("local parent")
    parents.append(trace.set_span_in_context(local))
    for parent in parents:
        early = early_tracer.start_span("s", context=parent)
        wanted = early.get_span_context()
        root = not trace.get_current_span(parent).get_span_context().is_valid
        ids.force(wanted.trace_id if root else None, wanted.span_id)
        recorded = real.start_span("s", context=parent)
        got = recorded.get_span_context()
        assert (got.trace_id, got.span_id, got.trace_flags, got.trace_state) == (
            wanted.trace_id,
            wanted.span_id,
            wanted.trace_flags,
            wanted.trace_state,
        )
        assert early.is_recording() == recorded.is_recording()


def test_early_spans_are_recorded_with_what_was_done_to_them() -> None:
    """Ended before the SDK, or ended after: attributes, events with their times, status, start and end times."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, Status, StatusCode

    from acp_otel._proxy import deferred
    from acp_otel._proxy.telemetry import ReplayIds

    decide = deferred.early_sampler({})
    assert decide is not None
    early_tracer = deferred.DeferredTracer(decide)
    done = early_tracer.start_span("done", kind=SpanKind.CLIENT, attributes={"a": 1})
    done.set_attribute("b", "x")
    done.add_event("e", {"k": "v"})
    done.set_status(Status(StatusCode.ERROR, "failed"))
    done.end()
    done.set_attribute("after.end", True)  # ignored, as the SDK ignores it
    open_span = early_tracer.start_span("open", kind=SpanKind.PRODUCER)
    open_span.set_attribute("c", 2)
    exporter = InMemorySpanExporter()
    ids = ReplayIds()
    provider = TracerProvider(shutdown_on_exit=False, id_generator=ids)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert early_tracer.attach(provider.get_tracer("t"), ids.force) == 2
    open_span.set_attribute("d", 3)
    open_span.end()
    late = early_tracer.start_span("late")  # the SDK's own span now
    late.end()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"done", "open", "late"}
    first, second = spans["done"], spans["open"]
    assert first.context == done.get_span_context() and second.context == open_span.get_span_context()
    assert first.kind is SpanKind.CLIENT and second.kind is SpanKind.PRODUCER
    assert dict(first.attributes or {}) == {"a": 1, "b": "x"}
    assert [(e.name, dict(e.attributes or {})) for e in first.events] == [("e", {"k": "v"})]
    assert first.status.status_code is StatusCode.ERROR and first.status.description == "failed"
    assert first.start_time is not None and first.end_time is not None
    assert first.start_time <= first.events[0].timestamp <= first.end_time
    assert first.end_time <= (second.end_time or 0)  # ended before the SDK was attached, the other after
    assert dict(second.attributes or {}) == {"c": 2, "d": 3}
    provider.shutdown()


def test_early_metric_records_are_recorded_once_the_meter_provider_exists() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from acp_otel import _metrics
    from acp_otel._proxy import deferred

    early = _metrics.make_instruments(deferred.DeferredMeterProvider(), "0")
    assert early is not None and early.recording()
    early.client_duration.record(0.25, {"acp.method.name": "initialize"})
    early.input_tokens.add(7)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    real = _metrics.make_instruments(provider, "0")
    deferred.attach_instruments(early, real)
    early.client_duration.record(0.5, {"acp.method.name": "initialize"})
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        m.name: list(m.data.data_points) for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    (duration,) = points["acp.client.operation.duration"]
    assert duration.count == 2 and duration.sum == pytest.approx(0.75)
    (tokens,) = points["acp.turn.usage.input_tokens"]
    assert tokens.value == 7
    provider.shutdown()


# ------------------------------------------------------------------ lines relayed before the engine, in process

EARLY_PARENTS = [None, *(f"00-{EDITOR_TRACE}-{INIT_PARENT}-{flags:02x}" for flags in (0, 1, 2, 3))]


def _initialize_line(traceparent: str | None, method: str = "initialize") -> bytes:
    meta = f',"_meta":{{"traceparent":"{traceparent}"}}' if traceparent else ""
    return f'{{"jsonrpc":"2.0","id":0,"method":"{method}","params":{{"protocolVersion":1{meta}}}}}'.encode()


@pytest.mark.parametrize("env", SAMPLERS, ids=lambda e: "-".join(e.values()) or "default")
def test_early_requests_are_forwarded_as_the_engine_forwards_them(env: dict[str, str]) -> None:
    """For each built-in sampler (those that drop too), kind of parent (none; the editor's, sampled or not,
    with or without the random trace id flag) and request :mod:`early` relays: the bytes it forwards are those
    the engine forwards for the same line when its early tracer is given the same ids (what the replay does)."""
    from acp_otel._agent_switches import PARENT_META_KEYS
    from acp_otel._engine import Engine
    from acp_otel._proxy import deferred, early
    from acp_otel._proxy.tracing import Direction, MessageTracer
    from acp_otel._settings import load_settings

    decision, flag = early.sampler_decision(env), early.random_flag()
    assert decision is not None and flag is not None
    cases = [
        (p, m, k) for p in EARLY_PARENTS for m in sorted(early.EARLY_METHODS) for k in ((), *PARENT_META_KEYS.values())
    ]
    for traceparent, method, extra_keys in cases:  # extra keys: the agent's own, with --agent-telemetry
        settings = load_settings({"extra_trace_keys": ",".join(extra_keys)} if extra_keys else {}, {})
        assert settings.extra_trace_keys == extra_keys
        for _ in range(10):  # random trace ids, for the ratio samplers
            lines = early.EarlyLines(decision, flag, extra_keys)
            line = _initialize_line(traceparent, method)
            forwarded = lines.relay(True, line)
            assert forwarded is not None and forwarded != line
            (kept,) = lines.kept
            assert kept.ids is not None and (kept.line, kept.forwarded) == (line, forwarded)
            decide = deferred.early_sampler(env)
            assert decide is not None
            tracer = deferred.DeferredTracer(decide)
            message_tracer = MessageTracer(Engine(tracer, settings))
            tracer.force_ids(*kept.ids)
            assert message_tracer.on_line(Direction.EDITOR_TO_AGENT, line) == (forwarded, None)


def test_early_leaves_to_the_engine_what_it_does_not_reproduce() -> None:
    """Lines :mod:`early` does not decide (the engine is then imported and they wait for it), lines it relays
    untouched as the engine would (responses kept for the engine), and configurations it stands aside for."""
    from acp_otel import _settings
    from acp_otel._proxy import early

    decision = early.sampler_decision({})
    assert decision is not None
    lines = early.EarlyLines(decision, 0)
    for meta in (
        '"tracestate":"v=1"',
        '"baggage":"k=v"',
        '"traceparent":"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"',
        '"traceparent":"00-00000000000000000000000000000000-b7ad6b7169203331-01"',
        '"traceparent":"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"',
        '"traceparent":7',
    ):
        line = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"_meta":{%s}}}' % meta.encode()
        assert lines.relay(True, line) is None, meta
    undecided = [
        b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"_meta":"x"}}',
        b'{"jsonrpc":"2.0","id":0,"method":"initialize"}',
        b'{"jsonrpc":"2.0","method":"initialize","params":{}}',
        b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}',
        b'{"jsonrpc":"2.0","id":1,"method":"$/x","params":{}}',
        b'{"jsonrpc":"2.0","method":"session/update","params":{}}',
    ]
    assert [lines.relay(True, line) for line in undecided] == [None] * len(undecided)
    assert lines.relay(False, b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}') is None
    untouched = [b"not json", b"[1,2]", b'"text"', b'{"id":3}', b'{"jsonrpc":"2.0","id":0,"result":{}}']
    assert [lines.relay(False, line) for line in untouched] == untouched
    assert [k.line for k in lines.kept] == [untouched[-1]]  # the response ends a span: kept for the engine
    assert early.stand_in_for({}, {}) is not None
    for variable_env in ({"OTEL_PROPAGATORS": "b3"}, {"OTEL_TRACES_SAMPLER": "plugin"}):
        assert early.stand_in_for({}, variable_env) is None
    assert early.stand_in_for({}, {"OTEL_PROPAGATORS": "tracecontext, baggage"}) is not None
    for option, variable in early.INJECTION_SETTINGS.items():
        assert _settings._OPTIONS[option][0] == variable  # the settings' own names
        assert early.stand_in_for({option: "x"}, {}) is None
        assert early.stand_in_for({}, {variable: "x"}) is None


def test_the_random_trace_id_flag_is_read_as_the_api_has_it() -> None:
    from opentelemetry.trace import TraceFlags

    from acp_otel._proxy import early

    assert early.random_flag() == int(getattr(TraceFlags, "RANDOM_TRACE_ID", 0))


def test_request_durations_follow_the_engine_clock() -> None:
    """The replay's clock: a request's duration is measured between the times the engine is given."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.trace import NoOpTracer

    from acp_otel import _metrics
    from acp_otel._engine import Engine
    from acp_otel._proxy.tracing import Direction, MessageTracer
    from acp_otel._settings import load_settings

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    engine = Engine(NoOpTracer(), load_settings({}, {}), _metrics.make_instruments(provider, "0"))
    message_tracer = MessageTracer(engine)
    engine.use_clock(lambda: 100.0)
    message_tracer.on_line(Direction.EDITOR_TO_AGENT, _initialize_line(None))
    engine.use_clock(lambda: 100.25)
    message_tracer.on_line(Direction.AGENT_TO_EDITOR, b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}')
    engine.use_clock(None)
    data = reader.get_metrics_data()
    assert data is not None
    (duration,) = [
        point
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "acp.client.operation.duration"
        for point in m.data.data_points
    ]
    assert duration.count == 1 and duration.sum == pytest.approx(0.25)
    provider.shutdown()
