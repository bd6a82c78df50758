"""Faults: dead peers, closed connections, cancellation, a dead or silent OTLP endpoint, and failures
inside the tracing itself. The application's results are unchanged and no span stays open."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import pytest
from acp_app import FILE_BODY, TraceAgent, TraceClient, initialize, prompt
from hostile_harness import SpanCounter, capture_logs, wait_spans_closed
from opentelemetry import propagate
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.sdk.trace import SpanProcessor

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def counter(provider: Any) -> SpanCounter:
    c = SpanCounter()
    provider.add_span_processor(c)
    return c


def _spans(exporter: Any, name: str, kind: str | None = None) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == name and (kind is None or s.kind.name == kind)]


async def _wait_open(counter: SpanCounter, name: str, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while name not in counter.open.values():
        assert loop.time() < deadline, f"{name} never started"
        await asyncio.sleep(0.01)


async def _full_turn(pair: Any) -> dict[str, Any]:
    """One complete turn on a fresh pair; what the application observed."""
    p = await pair(TraceAgent(), TraceClient())
    init = await initialize(p.client_conn)
    session = await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])
    result = await prompt(p.client_conn, session.session_id, "hello")
    ext = await p.client_conn.ext_method("test.dev/ping", {"_meta": {"keep": 1}})
    failed = None
    try:
        await prompt(p.client_conn, session.session_id, "rpcerror")
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


async def test_agent_process_killed_with_request_pending(instrument: Any, exporter: Any, counter: SpanCounter) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.join(HERE, "acp_app.py"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    from acp import ClientSideConnection

    assert proc.stdin is not None and proc.stdout is not None
    conn = ClientSideConnection(lambda c: TraceClient(), proc.stdin, proc.stdout)
    try:
        await asyncio.wait_for(initialize(conn), 20)
        session = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(prompt(conn, session.session_id, "exit now"), 10)
        assert await asyncio.wait_for(proc.wait(), 10) == 3
    finally:
        await conn.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    await wait_spans_closed(counter)
    assert not counter.open
    span = _spans(exporter, "session/prompt", "CLIENT")[0]
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "ConnectionError"
    # This process keeps working.
    assert (await asyncio.wait_for(_full_turn_factory(), 20))["stop"] == "end_turn"


async def _full_turn_factory() -> dict[str, Any]:
    from acp_app import Pair

    p = await Pair(TraceAgent(), TraceClient()).start()
    try:
        await initialize(p.client_conn)
        session = await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])
        return {"stop": (await prompt(p.client_conn, session.session_id, "hi")).stop_reason}
    finally:
        await p.close()


async def test_client_process_killed_with_agent_request_pending(
    instrument: Any, exporter: Any, counter: SpanCounter
) -> None:
    from acp import AgentSideConnection

    conns: list[Any] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(AgentSideConnection(lambda c: TraceAgent(), writer, reader))

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.join(HERE, "fault_peers.py"),
        "client",
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert await asyncio.wait_for(proc.wait(), 20) == 4
        await wait_spans_closed(counter)
        assert not counter.open
        permission = _spans(exporter, "session/request_permission", "CLIENT")[0]
        assert permission.status.status_code.name == "ERROR"
        assert permission.attributes["error.type"] == "ConnectionError"
        server_prompt = _spans(exporter, "session/prompt", "SERVER")[0]
        assert server_prompt.status.status_code.name == "ERROR"
    finally:
        for c in conns:
            await c.close()
        server.close()
    assert (await asyncio.wait_for(_full_turn_factory(), 20))["stop"] == "end_turn"


# ------------------------------------------------------------------------------------------ close / cancel


@pytest.mark.parametrize("who", ["agent", "client"])
async def test_close_with_requests_and_handlers_in_flight(
    who: str, instrument: Any, pair: Any, exporter: Any, counter: SpanCounter
) -> None:
    p = await pair(TraceAgent(), TraceClient())
    await initialize(p.client_conn)
    session = await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])
    task = asyncio.create_task(prompt(p.client_conn, session.session_id, "slow"))
    await _wait_open(counter, "session/prompt")
    await asyncio.sleep(0.05)  # the agent's handler is running
    await (p.agent_conn if who == "agent" else p.client_conn).close()
    if who == "agent":  # Connection.close() leaves the socket open (0.12.1); the process would exit
        p._writers[0].close()
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(task, 10)
    if who == "client":
        await p.agent_conn.close()
    await wait_spans_closed(counter)
    assert not counter.open, counter.open
    client_span = _spans(exporter, "session/prompt", "CLIENT")[0]
    assert client_span.attributes["error.type"] == "ConnectionError"
    server_span = _spans(exporter, "session/prompt", "SERVER")[0]
    assert server_span.attributes.get("acp.cancelled") is True


async def test_caller_side_cancellation(instrument: Any, pair: Any, exporter: Any, counter: SpanCounter) -> None:
    p = await pair(TraceAgent(), TraceClient())
    await initialize(p.client_conn)
    session = await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(prompt(p.client_conn, session.session_id, "slow"), 0.2)
    client_span = _spans(exporter, "session/prompt", "CLIENT")[0]
    assert client_span.attributes.get("acp.cancelled") is True
    assert client_span.status.status_code.name == "UNSET"
    # task.cancel() on a second prompt
    task = asyncio.create_task(prompt(p.client_conn, session.session_id, "slow"))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(_spans(exporter, "session/prompt", "CLIENT")) == 2
    # The agent's handlers are still running (0.12.1 sends nothing on caller cancel); cancelling the
    # session ends them, and their late responses are dropped.
    await p.client_conn.cancel(session_id=session.session_id)
    await wait_spans_closed(counter)
    assert not counter.open, counter.open
    servers = _spans(exporter, "session/prompt", "SERVER")
    if "_cancel_incoming" in vars(type(p.client_conn._conn)):
        # 1.0.0rc3+: the cancelled caller sent $/cancel_request, which cancelled the handler task at once
        assert all(s.attributes.get("acp.cancelled") is True for s in servers) and len(servers) == 2
    else:
        assert {s.attributes.get("acp.stop_reason") for s in servers} == {"cancelled"}
    # The connection still works.
    assert (await prompt(p.client_conn, session.session_id, "hi")).stop_reason == "end_turn"


async def test_session_cancel_turn(instrument: Any, pair: Any, exporter: Any, counter: SpanCounter) -> None:
    p = await pair(TraceAgent(), TraceClient())
    await initialize(p.client_conn)
    session = await p.client_conn.new_session(cwd="/tmp", mcp_servers=[])
    task = asyncio.create_task(prompt(p.client_conn, session.session_id, "slow"))
    await _wait_open(counter, "session/prompt")
    await p.client_conn.cancel(session_id=session.session_id)
    result = await asyncio.wait_for(task, 10)
    assert result.stop_reason == "cancelled"
    await wait_spans_closed(counter)
    assert not counter.open
    for kind in ("CLIENT", "SERVER"):
        span = _spans(exporter, "session/prompt", kind)[0]
        assert span.attributes["acp.stop_reason"] == "cancelled"
        assert span.status.status_code.name == "UNSET"
    assert _spans(exporter, "session/cancel", "PRODUCER") and _spans(exporter, "session/cancel", "CONSUMER")


# ------------------------------------------------------------------------------------------ broken tracing


class BrokenPropagator(TextMapPropagator):
    def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
        raise RuntimeError("extract is broken")

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        raise RuntimeError("inject is broken")

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


async def test_failing_propagator_changes_nothing(
    instrument: Any, pair: Any, exporter: Any, counter: SpanCounter
) -> None:
    inst = instrument()
    inst.uninstrument()
    baseline = await _full_turn(pair)
    old = propagate.get_global_textmap()
    propagate.set_global_textmap(BrokenPropagator())
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
    assert not [r for r in logs.records if r.name.startswith("acp_otel") and r.levelno > 10]


@pytest.mark.parametrize(("on_start", "on_end"), [(True, False), (False, True), (True, True)])
async def test_raising_span_processor_changes_nothing(
    on_start: bool, on_end: bool, instrument: Any, provider: Any, pair: Any, counter: SpanCounter
) -> None:
    inst = instrument()
    inst.uninstrument()
    baseline = await _full_turn(pair)
    provider.add_span_processor(RaisingProcessor(on_start, on_end))
    instrument()
    traced = await _full_turn(pair)
    assert traced == baseline
    if not on_start:  # a span whose start raised was never handed to us, so only then can we end all
        await wait_spans_closed(counter)
        assert not counter.open, counter.open


# ------------------------------------------------------------------------------------------ OTLP endpoint faults


async def _http_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()


async def _black_hole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await asyncio.sleep(3600)  # accept, never read, never answer


class _Tee:
    """Feeds the agent's stdout to the SDK while keeping every raw byte for inspection."""

    def __init__(self, source: asyncio.StreamReader) -> None:
        self.reader = asyncio.StreamReader(limit=2**24)
        self.raw = bytearray()
        self._task = asyncio.create_task(self._pump(source))

    async def _pump(self, source: asyncio.StreamReader) -> None:
        while chunk := await source.read(65536):
            self.raw.extend(chunk)
            self.reader.feed_data(chunk)
        self.reader.feed_eof()


async def _measure(endpoint: str, turns: int) -> dict[str, Any]:
    from acp import ClientSideConnection

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([HERE, os.path.dirname(HERE)]),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_BSP_EXPORT_TIMEOUT": "1000",
    }
    stderr = tempfile.TemporaryFile()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        os.path.join(HERE, "fault_peers.py"),
        "agent",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    tee = _Tee(proc.stdout)
    conn = ClientSideConnection(lambda c: TraceClient(), proc.stdin, tee.reader)
    latencies = []
    try:
        await asyncio.wait_for(initialize(conn), 30)
        session = await asyncio.wait_for(conn.new_session(cwd="/tmp", mcp_servers=[]), 10)
        for _ in range(turns):
            start = time.perf_counter()
            result = await asyncio.wait_for(prompt(conn, session.session_id, "hello"), 10)
            latencies.append(time.perf_counter() - start)
            assert result.stop_reason == "end_turn"
    finally:
        t0 = time.perf_counter()
        proc.stdin.close()
        try:
            code = await asyncio.wait_for(proc.wait(), 30)
        except asyncio.TimeoutError:
            proc.kill()
            code = await proc.wait()
        exit_s = time.perf_counter() - t0
        await conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(tee._task, 5)
    stderr.seek(0)
    return {
        "median": statistics.median(latencies[1:]),
        "exit_s": exit_s,
        "code": code,
        "stdout": bytes(tee.raw),
        "stderr": stderr.read().decode("utf-8", "replace"),
    }


async def test_otlp_endpoint_down_or_silent_does_not_slow_or_block_acp() -> None:
    ok_server = await asyncio.start_server(_http_ok, "127.0.0.1", 0)
    hole = await asyncio.start_server(_black_hole, "127.0.0.1", 0)
    closed = await asyncio.start_server(_black_hole, "127.0.0.1", 0)
    closed_port = closed.sockets[0].getsockname()[1]
    closed.close()
    await closed.wait_closed()  # connection refused from now on
    endpoints = {
        "healthy": f"http://127.0.0.1:{ok_server.sockets[0].getsockname()[1]}/v1/traces",
        "refused": f"http://127.0.0.1:{closed_port}/v1/traces",
        "black-hole": f"http://127.0.0.1:{hole.sockets[0].getsockname()[1]}/v1/traces",
    }
    try:
        runs = {name: await _measure(url, turns=12) for name, url in endpoints.items()}
    finally:
        ok_server.close()
        hole.close()
    healthy = runs["healthy"]["median"]
    print()
    for name, run in runs.items():
        print(f"  {name:10s} turn median {run['median'] * 1000:7.2f} ms, exit after EOF {run['exit_s']:.2f} s")
    for name, run in runs.items():
        assert run["code"] == 0, (name, run["stderr"][-2000:])
        assert run["median"] < 3 * healthy + 0.05, (name, run["median"], healthy)
        assert run["exit_s"] < 15, (name, run["exit_s"])  # bounded shutdown
        for line in run["stdout"].splitlines():  # stdout carries the protocol and nothing else
            if line.strip():
                assert json.loads(line).get("jsonrpc") == "2.0", line[:200]
    assert FILE_BODY  # (the turn reads a file through the client: full protocol exercised)
