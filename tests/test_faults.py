"""Faults: dead peers, closed connections, cancellation, a dead or silent OTLP endpoint, and failures
inside the tracing itself. The application's results are unchanged and no span stays open."""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import sys
import time
import traceback
from typing import Any

import pytest
from acp_app import TraceAgent, TraceClient, initialize, open_session, prompt
from agent_process import agent_process
from log_capture import capture_logs
from opentelemetry import propagate
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.trace import SpanProcessor
from paths import PEERS
from sdk_versions import PENDING_REJECTED_AT_EOF
from spans import SpanCounter, find, one, wait_spans_closed, wait_started

from acp_otel._demo.receiver import OtlpReceiver


async def _full_turn(pair: Any) -> dict[str, Any]:
    """One complete turn on a fresh pair; what the application observed."""
    p = await pair(TraceAgent(), TraceClient())
    init = await initialize(p.client_conn)
    session_id = (await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])).session_id
    result = await prompt(p.client_conn, session_id, "hello")
    ext = await p.client_conn.ext_method("test.dev/ping", {"_meta": {"keep": 1}})
    failed = None
    try:
        await prompt(p.client_conn, session_id, "rpcerror")
    except Exception as exc:
        failed = (type(exc).__name__, getattr(exc, "code", None), getattr(exc, "data", None))
    return {
        "agent": init.agent_info.name if init.agent_info else None,
        "stop": result.stop_reason,
        "updates": len(p.client.updates),
        "ext_params": p.client.ext_params,
        "ext": ext,
        "failed": failed,
        "init_kwargs": p.agent.init_kwargs,
    }


# ------------------------------------------------------------------------------------------ dead peers


@PENDING_REJECTED_AT_EOF
async def test_agent_process_killed_with_request_pending(
    instrument: Any, exporter: Any, counter: SpanCounter, pair: Any
) -> None:
    async with agent_process() as agent:
        await asyncio.wait_for(initialize(agent.conn), 20)
        session_id = (await asyncio.wait_for(agent.conn.new_session(cwd="/tmp", mcp_servers=[]), 10)).session_id
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(prompt(agent.conn, session_id, "exit now"), 10)
    assert agent.returncode == 3 and not agent.killed, agent.stderr[-2000:]
    await wait_spans_closed(counter)
    assert not counter.open
    span = one(exporter.get_finished_spans(), "session/prompt", "CLIENT")
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "ConnectionError"
    # This process keeps working.
    assert (await asyncio.wait_for(_full_turn(pair), 20))["stop"] == "end_turn"


@PENDING_REJECTED_AT_EOF
async def test_client_process_killed_with_agent_request_pending(
    instrument: Any, exporter: Any, counter: SpanCounter, pair: Any
) -> None:
    from acp import AgentSideConnection

    conns: list[Any] = []
    writers: list[asyncio.StreamWriter] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        conns.append(AgentSideConnection(lambda c: TraceAgent(), writer, reader))

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PEERS / "fault_client.py"),
        "client",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert await asyncio.wait_for(proc.wait(), 20) == 4
        await wait_spans_closed(counter)
        assert not counter.open
        spans = exporter.get_finished_spans()
        permission = one(spans, "session/request_permission", "CLIENT")
        assert permission.status.status_code.name == "ERROR"
        assert permission.attributes["error.type"] == "ConnectionError"
        server_prompt = one(spans, "session/prompt", "SERVER")
        assert server_prompt.status.status_code.name == "ERROR"
    finally:
        for c in conns:
            await c.close()
        for w in writers:  # Connection.close() leaves the socket open (0.12.1)
            w.close()
        server.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert (await asyncio.wait_for(_full_turn(pair), 20))["stop"] == "end_turn"


# ------------------------------------------------------------------------------------------ close / cancel


@pytest.mark.parametrize("who", [pytest.param("agent", marks=PENDING_REJECTED_AT_EOF), "client"])
async def test_close_with_requests_and_handlers_in_flight(
    who: str, instrument: Any, pair: Any, exporter: Any, counter: SpanCounter
) -> None:
    p = await pair(TraceAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    task = asyncio.create_task(prompt(p.client_conn, session_id, "slow"))
    await wait_started(counter, "session/prompt", "SERVER")  # the agent's handler is running
    await (p.agent_conn if who == "agent" else p.client_conn).close()
    if who == "agent":  # Connection.close() leaves the socket open (0.12.1); the process would exit
        p._writers[0].close()
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(task, 10)
    if who == "client":
        await p.agent_conn.close()
    await wait_spans_closed(counter)
    assert not counter.open, counter.open
    spans = exporter.get_finished_spans()
    client_span = one(spans, "session/prompt", "CLIENT")
    assert client_span.attributes["error.type"] == "ConnectionError"
    server_span = one(spans, "session/prompt", "SERVER")
    assert server_span.attributes.get("acp.cancelled") is True


async def test_caller_side_cancellation(instrument: Any, pair: Any, exporter: Any, counter: SpanCounter) -> None:
    p = await pair(TraceAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(prompt(p.client_conn, session_id, "slow"), 0.2)
    client_span = one(exporter.get_finished_spans(), "session/prompt", "CLIENT")
    assert client_span.attributes.get("acp.cancelled") is True
    assert client_span.status.status_code.name == "UNSET"
    # task.cancel() on a second prompt, once the agent's handler for it runs
    task = asyncio.create_task(prompt(p.client_conn, session_id, "slow"))
    await wait_started(counter, "session/prompt", "SERVER", count=2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    clients = find(exporter.get_finished_spans(), "session/prompt", "CLIENT")
    assert len(clients) == 2 and all(c.attributes.get("acp.cancelled") is True for c in clients)
    # The agent's handlers are still running (0.12.1 sends nothing on caller cancel); cancelling the
    # session ends them, and their late responses are dropped.
    await p.client_conn.cancel(session_id=session_id)
    await wait_spans_closed(counter)
    assert not counter.open, counter.open
    servers = find(exporter.get_finished_spans(), "session/prompt", "SERVER")
    assert len(servers) == 2
    if "_cancel_incoming" in vars(type(p.client_conn._conn)):
        # 1.0.0rc3+: the cancelled caller sent $/cancel_request, which cancelled the handler task at once
        assert all(s.attributes.get("acp.cancelled") is True for s in servers)
    else:
        assert {s.attributes.get("acp.stop_reason") for s in servers} == {"cancelled"}
    # The connection still works.
    assert (await prompt(p.client_conn, session_id, "hi")).stop_reason == "end_turn"


async def test_session_cancel_turn(instrument: Any, pair: Any, exporter: Any, counter: SpanCounter) -> None:
    p = await pair(TraceAgent(), TraceClient())
    session_id = await open_session(p.client_conn)
    task = asyncio.create_task(prompt(p.client_conn, session_id, "slow"))
    await wait_started(counter, "session/prompt", "SERVER")
    await p.client_conn.cancel(session_id=session_id)
    result = await asyncio.wait_for(task, 10)
    assert result.stop_reason == "cancelled"
    await wait_spans_closed(counter)
    assert not counter.open
    spans = exporter.get_finished_spans()
    for kind in ("CLIENT", "SERVER"):
        span = one(spans, "session/prompt", kind)
        assert span.attributes["acp.stop_reason"] == "cancelled"
        assert span.status.status_code.name == "UNSET"
    one(spans, "session/cancel", "PRODUCER")
    one(spans, "session/cancel", "CONSUMER")


# ------------------------------------------------------------------------------------------ broken tracing


class BrokenPropagator(TextMapPropagator):
    """Raises in the operations named in ``broken``; the others are those of ``working``."""

    def __init__(self, working: TextMapPropagator, broken: tuple[str, ...]) -> None:
        self._working, self._broken = working, broken

    def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
        if "extract" in self._broken:
            raise RuntimeError("extract is broken")
        return (
            self._working.extract(carrier, context)
            if getter is None
            else self._working.extract(carrier, context, getter)
        )

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        if "inject" in self._broken:
            raise RuntimeError("inject is broken")
        if setter is None:
            self._working.inject(carrier, context)
        else:
            self._working.inject(carrier, context, setter)

    @property
    def fields(self) -> set[str]:
        raise RuntimeError("fields is broken")


class RaisingProcessor(SpanProcessor):
    def __init__(self, on_start: bool, on_end: bool) -> None:
        self._start, self._end = on_start, on_end

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self._start:
            raise RuntimeError("on_start is broken")

    def on_end(self, span: Any) -> None:
        if self._end:
            raise RuntimeError("on_end is broken")


def _escaped_failures(records: list[logging.LogRecord]) -> list[str]:
    """Records of loggers other than acp_otel that carry an exception raised in acp_otel or by the broken
    propagator: a failure of the tracing that reached the SDK or the application."""
    bad = []
    for r in records:
        if r.name.startswith("acp_otel") or not r.exc_info or r.exc_info[2] is None:
            continue
        frames = traceback.extract_tb(r.exc_info[2])
        if (frames and "acp_otel" in frames[-1].filename) or "is broken" in str(r.exc_info[1]):
            bad.append(f"{r.name}: {r.getMessage()} ({r.exc_info[1]!r})")
    return bad


@pytest.mark.parametrize("broken", [("inject", "extract"), ("inject",), ("extract",)], ids="+".join)
async def test_failing_propagator_changes_nothing(
    broken: tuple[str, ...], instrument: Any, pair: Any, exporter: Any, counter: SpanCounter
) -> None:
    instrument.off()
    baseline = await _full_turn(pair)
    old = propagate.get_global_textmap()
    propagate.set_global_textmap(BrokenPropagator(old, broken))
    try:
        instrument()
        with capture_logs() as logs:
            traced = await _full_turn(pair)
            await wait_spans_closed(counter)
    finally:
        propagate.set_global_textmap(old)
    assert traced == baseline
    assert not counter.open, counter.open
    assert counter.started > 10
    ours = [r for r in logs.records if r.name.startswith("acp_otel")]
    assert all(r.levelno == logging.DEBUG for r in ours), [(r.levelname, r.getMessage()) for r in ours]
    # The failures were exercised (extraction only when injection works: nothing to extract otherwise),
    # and swallowed by acp_otel: logged at DEBUG with their exception, and nowhere else.
    exercised = ("inject",) if "inject" in broken else ("extract",)
    for what in exercised:
        logged = [r for r in ours if r.getMessage() == f"acp_otel: propagator failed to {what}"]
        assert logged and all(str(r.exc_info[1]) == f"{what} is broken" for r in logged), what
    assert not _escaped_failures(logs.records), _escaped_failures(logs.records)
    # No incoming span continued the caller's trace: there was no context to extract, or extraction failed.
    servers = [s for s in exporter.get_finished_spans() if s.kind.name == "SERVER"]
    assert servers and not [s.name for s in servers if s.parent is not None and s.parent.is_remote]


@pytest.mark.parametrize(("on_start", "on_end"), [(True, False), (False, True), (True, True)])
async def test_raising_span_processor_changes_nothing(
    on_start: bool, on_end: bool, instrument: Any, provider: Any, pair: Any, counter: SpanCounter
) -> None:
    instrument.off()
    baseline = await _full_turn(pair)
    provider.add_span_processor(RaisingProcessor(on_start, on_end))
    instrument()
    traced = await _full_turn(pair)
    assert traced == baseline
    if not on_start:  # a span whose start raised was never handed to us, so only then can we end all
        await wait_spans_closed(counter)
        assert not counter.open, counter.open


# ------------------------------------------------------------------------------------------ OTLP endpoint faults


class _BlackHole:
    """A server that accepts connections and never reads or answers; ``close()`` ends its handlers."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/traces"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            await asyncio.Event().wait()
        finally:
            writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.wait_for(self.server.wait_closed(), 5)


async def _refused_url() -> str:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()  # connection refused from now on
    return f"http://127.0.0.1:{port}/v1/traces"


TURNS = 10
PACE_S = 0.1  # between turns, beyond the batch delay: the agent exports while the turns go on
OTLP_ENV = {
    "ACP_OTEL_TEST_SPANS": "otlp",
    "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
    "OTEL_BSP_SCHEDULE_DELAY": "50",
    "OTEL_BSP_EXPORT_TIMEOUT": "1000",
}


async def _measure(endpoint: str, receiver: OtlpReceiver | None = None) -> dict[str, Any]:
    """``TURNS`` prompt turns to an agent process exporting its spans to ``endpoint``; turn latencies, the
    exports ``receiver`` (when it is the endpoint) had received by the last turn, and how the agent ended."""
    latencies = []
    exports_during_turns = None
    async with agent_process(env={**OTLP_ENV, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint}, exit_timeout=30) as a:
        await asyncio.wait_for(initialize(a.conn), 30)
        session_id = (await asyncio.wait_for(a.conn.new_session(cwd="/tmp", mcp_servers=[]), 10)).session_id
        for _ in range(TURNS):
            start = time.perf_counter()
            result = await asyncio.wait_for(prompt(a.conn, session_id, "hello"), 10)
            latencies.append(time.perf_counter() - start)
            assert result.stop_reason == "end_turn"
            await asyncio.sleep(PACE_S)
        if receiver is not None:
            exports_during_turns = receiver.export_count
    return {
        "median": statistics.median(latencies[1:]),
        "exit_s": a.exit_s,
        "code": a.returncode,
        "killed": a.killed,
        "stdout": a.stdout,
        "stderr": a.stderr,
        "exports_during_turns": exports_during_turns,
    }


async def test_otlp_endpoint_down_or_silent_does_not_slow_or_block_acp() -> None:
    hole = _BlackHole()
    with OtlpReceiver() as receiver:
        try:
            endpoints = {
                "healthy": receiver.http_traces_url,
                "refused": await _refused_url(),
                "black-hole": await hole.start(),
            }
            runs = {
                name: await _measure(url, receiver if name == "healthy" else None) for name, url in endpoints.items()
            }
        finally:
            await hole.close()
        received = receiver.spans()
    print()
    for name, run in runs.items():
        print(f"  {name:10s} turn median {run['median'] * 1000:7.2f} ms, exit after EOF {run['exit_s']:.2f} s")
    healthy = runs["healthy"]
    # The healthy endpoint proves the agent exported, and while the turns went on (not only at exit).
    assert healthy["exports_during_turns"] >= TURNS // 3, healthy["exports_during_turns"]
    assert len(find(received, "session/prompt", "SERVER", "test-agent")) == TURNS
    for name, run in runs.items():
        assert run["code"] == 0 and not run["killed"], (name, run["stderr"][-2000:])
        if name != "healthy":  # an unreachable or silent endpoint does not slow the turns down
            assert run["median"] < 3 * healthy["median"] + 0.05, (name, run["median"], healthy["median"])
        assert run["exit_s"] < 15, (name, run["exit_s"])  # bounded shutdown
        for line in run["stdout"].splitlines():  # stdout carries the protocol and nothing else
            if line.strip():
                assert json.loads(line).get("jsonrpc") == "2.0", line[:200]
