"""The proxy's process lifecycle with real processes: end of input each way, agent death, signals,
exit status, a missing command, and an OTLP endpoint that is down."""

from __future__ import annotations

import asyncio
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from acp_app import open_session, prompt
from exit_clock import ExitClock
from harness import PROXY, PY_AGENT, RAW_PEER, base_env, proxied_client
from otlp_sink import OtlpSink, closed_port

from acp_otel._proxy import process

pytestmark = pytest.mark.e2e

REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[]}}\n'


def start(agent: list[str], env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*PROXY, *args, "--", *agent], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )


def read_until(proc: subprocess.Popen[bytes], marker: bytes) -> bytes:
    assert proc.stdout is not None
    got = b""
    while marker not in got:
        chunk = proc.stdout.read1(65536)  # type: ignore[attr-defined]
        assert chunk, f"stdout ended before {marker!r}: {got!r}"
        got += chunk
    return got


@pytest.fixture
def sink() -> Any:
    with OtlpSink() as s:
        yield s


def test_editor_end_of_input_closes_agent_stdin_and_status_is_passed_on(tmp_path: Path, sink: OtlpSink) -> None:
    send = tmp_path / "send"
    send.write_bytes(b"")
    proc = start([*RAW_PEER, str(tmp_path / "rec"), str(send), "--exit", "5"], base_env(**sink.env()))
    out, err = proc.communicate(REQUEST, timeout=30)  # writes, then closes the proxy's stdin
    assert proc.returncode == 5 and out == b"" and err == b""
    assert b'"session/prompt"' in (tmp_path / "rec").read_bytes()  # the agent read it all, then saw EOF
    # The request was never answered: its span ends with the agent's exit, as an error.
    spans = sink.wait_for(lambda s: any(x.attributes.get("acp.method.name") == "session/prompt" for x in s))
    (span,) = [s for s in spans if s.attributes.get("acp.method.name") == "session/prompt"]
    assert span.status == "ERROR" and span.attributes["error.type"] == "AgentExited"
    assert span.description == "agent exited with status 5"


def test_agent_exit_ends_the_proxy_while_the_editor_keeps_stdin_open(sink: OtlpSink) -> None:
    agent = [sys.executable, "-c", 'print(\'{"jsonrpc":"2.0","method":"bye"}\', flush=True)']
    proc = start(agent, base_env(**sink.env()))
    try:
        assert proc.wait(20) == 0  # stdin still open: the agent's exit alone ends the proxy
        assert proc.stdout is not None and proc.stdout.read().startswith(b'{"jsonrpc":"2.0","method":"bye"')
    finally:
        proc.kill()
        proc.communicate()


async def test_agent_dies_mid_request(sink: OtlpSink) -> None:
    """The Python agent exits (status 3) inside session/prompt: the editor gets an error, the span ends ERROR."""
    env = base_env(**sink.env())
    async with proxied_client([*PY_AGENT, "trace"], env, ["--service-name", "proxy"]) as run:
        session_id = await open_session(run.conn)
        # The SDK's "connection closed" error differs by release; up to 0.9 the request hangs instead
        # (DESIGN.md §2), so a timeout stands in for it there.
        with pytest.raises(Exception):  # noqa: B017
            await asyncio.wait_for(prompt(run.conn, session_id, "exit now"), 10)
    assert run.returncode == 3
    spans = sink.wait_for(lambda s: any(x.attributes.get("acp.method.name") == "session/prompt" for x in s))
    (turn,) = [s for s in spans if s.attributes.get("acp.method.name") == "session/prompt"]
    assert turn.status == "ERROR" and turn.attributes["error.type"] == "AgentExited"


def test_agent_killed_by_a_signal_kills_the_proxy_with_it(tmp_path: Path, sink: OtlpSink) -> None:
    agent = [
        sys.executable,
        "-c",
        "import os, signal, sys; sys.stdin.buffer.readline(); os.kill(os.getpid(), signal.SIGKILL)",
    ]
    proc = start(agent, base_env(**sink.env()))
    out, err = proc.communicate(REQUEST, timeout=30)
    assert proc.returncode == -signal.SIGKILL and out == b"" and err == b""
    spans = sink.wait_for(lambda s: any(x.attributes.get("acp.method.name") == "session/prompt" for x in s))
    assert [s.description for s in spans if s.attributes.get("acp.method.name") == "session/prompt"] == [
        "agent exited with signal 9"
    ]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_are_forwarded(tmp_path: Path, signum: int) -> None:
    send, marker = tmp_path / "send", tmp_path / "signals"
    send.write_bytes(b'{"jsonrpc":"2.0","method":"ready"}\n')
    agent = [*RAW_PEER, str(tmp_path / "rec"), str(send), "--trap-signals", str(marker)]
    proc = start(agent, base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none"))
    try:
        read_until(proc, b'"ready"')  # the agent has installed its handlers
        proc.send_signal(signum)
        assert proc.wait(20) == 40 + signum  # the agent's own status, after handling the forwarded signal
        assert marker.read_text().split() == [signal.Signals(signum).name]
    finally:
        proc.kill()
        proc.communicate()


def _tgkill() -> Any:
    """glibc's ``tgkill`` (a signal to one thread of a process), or skip."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).tgkill
    except (OSError, AttributeError):
        pytest.skip("tgkill (Linux, glibc 2.30+) is needed to aim a signal at one thread")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_taken_by_another_thread_is_forwarded(tmp_path: Path, signum: int) -> None:
    """The kernel may hand a process's signal to any of its threads (here: aimed at one that is not the main
    thread, as the kernel may choose to): the proxy still forwards it, instead of waiting for ever."""
    tgkill = _tgkill()
    send, marker = tmp_path / "send", tmp_path / "signals"
    send.write_bytes(b'{"jsonrpc":"2.0","method":"ready"}\n')
    agent = [*RAW_PEER, str(tmp_path / "rec"), str(send), "--trap-signals", str(marker)]
    proc = start(agent, base_env(OTEL_TRACES_EXPORTER="none"))
    try:
        read_until(proc, b'"ready"')  # relayed: the proxy's threads run
        for _ in range(2000):  # until its main thread sleeps (waiting for the agent: nothing else is left)
            with open(f"/proc/{proc.pid}/task/{proc.pid}/stat") as stat:
                if stat.read().rpartition(")")[2].split()[0] == "S":
                    break
            time.sleep(0.005)
        others = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
        assert others, "the proxy has no thread besides its main thread"
        assert tgkill(proc.pid, others[0], signum) == 0
        assert proc.wait(20) == 40 + signum  # a liveness bound: without the forward the agent never exits
        assert marker.read_text().split() == [signal.Signals(signum).name]
    finally:
        proc.kill()
        proc.communicate()


def test_command_not_found_is_127_with_one_line() -> None:
    proc = start(["no-such-agent-command-xyz", "--flag"], base_env())
    out, err = proc.communicate(b"", timeout=30)
    assert proc.returncode == 127 and out == b""
    assert err.decode().splitlines() == ["acp-otel proxy: no-such-agent-command-xyz: command not found"]


async def test_endpoint_down_changes_nothing_and_exit_is_bounded() -> None:
    """OTLP pointed at a closed loopback port: the turn works, one line on stderr, exit within the flush bound."""
    env = base_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_BSP_SCHEDULE_DELAY="50",
        PYTHONWARNINGS="ignore::DeprecationWarning",  # the agent's stderr passes through: keep it quiet
    )
    async with proxied_client([*PY_AGENT, "trace"], env, ["--flush-timeout", "1"]) as run:
        with ExitClock(os.getpid()) as clock:
            session_id = await open_session(run.conn)
            result = await prompt(run.conn, session_id, "hello")
            assert result.stop_reason == "end_turn"
            run.proc.stdin.close()  # type: ignore[union-attr]
            await run.proc.wait()
    assert run.returncode == 0
    assert run.stderr.startswith("acp-otel proxy: telemetry: ") and run.stderr.count("\n") == 1, run.stderr
    # What the proxy took after its agent's exit, against its own bounds (the 1 s flush, the relaying of the
    # agent's last output), twice over for a loaded machine; an unbounded flush would retry the dead endpoint
    # for the exporter's 10 s.
    assert clock.proxy_after_agent_s() < 2 * (1.0 + process.OUTPUT_DRAIN_CAP_S)


class _Unauthorized(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_an_endpoint_answering_401_is_named_in_the_one_line(tmp_path: Path) -> None:
    """A real OTLP/HTTP endpoint that refuses the spans (401, say a missing API key): the line at exit says
    what it answered, not that it might be a gRPC port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        env = base_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_BSP_SCHEDULE_DELAY="50",
        )
        send = tmp_path / "send"
        send.write_bytes(b"")
        proc = start([*RAW_PEER, str(tmp_path / "rec"), str(send)], env, "--flush-timeout", "10")
        out, err = proc.communicate(REQUEST, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0 and out == b""
    (line,) = err.decode().splitlines()
    assert line.startswith("acp-otel proxy: telemetry: ") and f"not exported to {endpoint}/v1/traces" in line, line
    assert "it answered HTTP 401" in line and "gRPC" not in line, line


async def test_verbose_diagnostics_go_to_stderr_only() -> None:
    env = base_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{closed_port()}",
        OTEL_BSP_SCHEDULE_DELAY="50",
        OTEL_PYTHON_ACP_PROXY_DEBUG="true",
    )
    async with proxied_client([*PY_AGENT, "trace"], env, ["--flush-timeout", "2"]) as run:
        await open_session(run.conn)  # stdout carries only protocol, or the SDK client would have failed
    assert run.returncode == 0
    assert "acp-otel proxy:" in run.stderr


def test_editor_closing_its_end_ends_the_agents_output(tmp_path: Path) -> None:
    """The editor stops reading (closes the proxy's stdout) while the agent writes: the agent's writes fail as
    they would without the proxy, and the proxy ends with the agent instead of hanging."""
    send = tmp_path / "send"
    send.write_bytes(b"")
    agent = [*RAW_PEER, str(tmp_path / "rec"), str(send), "--flood", str(16 * 1024 * 1024)]
    proc = start(agent, base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", PYTHONWARNINGS="ignore"))
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdout.read(65536)
    proc.stdout.close()
    proc.stdin.close()
    assert proc.wait(30) != 0  # the agent died of its broken pipe; its status is passed on
