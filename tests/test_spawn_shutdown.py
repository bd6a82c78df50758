"""Unit tests for acp_otel._spawn (environment and naming rules, patching) and acp_otel._shutdown (flush, SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
from acp_app import initialize
from opentelemetry.sdk.trace import TracerProvider
from paths import peer_env
from spans import one, wait_until

from acp_otel import AcpInstrumentor
from acp_otel import _shutdown as shutdown
from acp_otel._spawn import child_environment, env_carrier, service_name_for_command

SITE = "/venv/lib/python3.11/site-packages/opentelemetry/instrumentation/auto_instrumentation"


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        ("python", ["agent.py"], "agent"),
        ("/usr/bin/python3.11", ["-u", "-X", "dev", "/srv/my_agent.py", "--flag"], "my_agent"),
        ("python3", ["-m", "acme.agents.coder", "--port", "1"], "coder"),
        ("python", ["-mhttp.server"], "server"),
        ("python", ["-c", "print(1)"], "python"),
        ("python", [], "python"),
        ("pypy3", ["x.py"], "x"),
        ("C:\\Python311\\python.exe", ["C:\\agents\\agent.py"], "agent"),
        ("node", ["--enable-source-maps", "dist/agent.js"], "agent"),
        ("/usr/local/bin/gemini", ["--experimental-acp"], "gemini"),
        ("claude-code-acp.exe", [], "claude-code-acp"),
        ("./run.sh", [], "run"),
        # a wrapper that runs its positional parameters: named after the command they hold
        ("bash", ["-c", 'exec "$@"', "_", "npx", "-y", "@scope/some-agent@1"], "some-agent"),
        ("sh", ["-c", '"${1}" --acp', "sh", "/usr/local/bin/gemini"], "gemini"),
        ("acp-otel", ["proxy", "--", "bash", "-c", 'exec "$@"', "_", "python", "agent.py"], "agent-proxy"),
        ("bash", ["-c", "exec $AGENT --acp"], "bash"),  # nothing to go by: the shell's name
    ],
)
def test_service_name_for_command(command: str, args: list[str], expected: str) -> None:
    assert service_name_for_command(command, args) == expected


def test_child_environment_rules() -> None:
    parent = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_SERVICE_NAME": "editor",
        "OTEL_RESOURCE_ATTRIBUTES": "service.name=editor,team=x",
        "PYTHONPATH": os.pathsep.join([SITE, "/app"]),
        "HOME": "/home/u",
    }
    trace_env = {"TRACEPARENT": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    # This interpreter in this environment: the sitecustomize entry goes along.
    env = child_environment(sys.executable, ["agent.py"], None, parent, trace_env, SITE)
    assert env == {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_SERVICE_NAME": "agent",
        "OTEL_RESOURCE_ATTRIBUTES": "team=x",
        "PYTHONPATH": SITE,
        **trace_env,
    }
    # Not under opentelemetry-instrument: no PYTHONPATH; an all-service.name attribute list disappears.
    env = child_environment("gemini", [], None, {"OTEL_RESOURCE_ATTRIBUTES": "service.name=e"}, {}, SITE)
    assert env == {"OTEL_SERVICE_NAME": "gemini"}
    # The caller's env= wins, including a service.name given only as a resource attribute.
    caller = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=mine", "PYTHONPATH": "/mine", "TRACEPARENT": "t"}
    env = child_environment("python", ["agent.py"], caller, parent, trace_env, SITE)
    assert "OTEL_SERVICE_NAME" not in env
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "service.name=mine"
    assert env["PYTHONPATH"] == "/mine" and env["TRACEPARENT"] == "t"
    env = child_environment("python", ["agent.py"], {"OTEL_SERVICE_NAME": "named"}, parent, {}, SITE)
    assert env["OTEL_SERVICE_NAME"] == "named"


def test_env_carrier_names() -> None:
    assert env_carrier({"traceparent": "a", "tracestate": "b", "baggage": "c", "x-b3-traceid": "d"}) == {
        "TRACEPARENT": "a",
        "TRACESTATE": "b",
        "BAGGAGE": "c",
        "X_B3_TRACEID": "d",
    }


def _spawn_attrs() -> dict[str, Any]:
    import acp
    import acp.stdio
    import acp.transports

    return {
        name: mod.__dict__["spawn_stdio_transport"]
        for name, mod in (("t", acp.transports), ("s", acp.stdio), ("a", acp))
    }


def test_uninstrument_restores_spawn_and_receive_loop(provider: TracerProvider) -> None:
    import acp.connection

    before = _spawn_attrs()
    loop_before = acp.connection.Connection.__dict__["_receive_loop"]
    instrumentor = AcpInstrumentor()
    for _ in range(2):  # twice: no stacking, exact restore each time
        instrumentor.instrument(tracer_provider=provider)
        during = _spawn_attrs()
        assert all(during[k] is not before[k] for k in before)
        assert all(during[k].__wrapped__ is before[k] for k in before)  # wrapped once, never a wrapper of a wrapper
        assert acp.connection.Connection.__dict__["_receive_loop"] is not loop_before
        instrumentor.uninstrument()
        assert _spawn_attrs() == before
        assert acp.connection.Connection.__dict__["_receive_loop"] is loop_before


async def test_spawn_failure_is_an_error_span(instrument: Any, exporter: Any) -> None:
    from acp.transports import spawn_stdio_transport

    with pytest.raises(FileNotFoundError):
        async with spawn_stdio_transport("/nonexistent/acp-agent"):
            pass
    span = one(exporter.get_finished_spans(), "acp.spawn")
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "FileNotFoundError"
    assert span.attributes["process.executable.name"] == "acp-agent"
    assert "process.pid" not in span.attributes


async def test_command_args_only_with_content_capture(instrument: Any, exporter: Any) -> None:
    from acp.transports import spawn_stdio_transport

    async with spawn_stdio_transport(sys.executable, "-c", "pass") as (_r, _w, process):
        await process.wait()
    span = one(exporter.get_finished_spans(), "acp.spawn")
    assert span.attributes["process.pid"] == process.pid
    assert "process.command_args" not in span.attributes  # a command line is content: off by default
    exporter.clear()
    instrument(capture_content=True)
    async with spawn_stdio_transport(sys.executable, "-c", "pass") as (_r, _w, process):
        await process.wait()
    span = one(exporter.get_finished_spans(), "acp.spawn")
    assert list(span.attributes["process.command_args"]) == [sys.executable, "-c", "pass"]


# ------------------------------------------------------------------ shutdown


class _CountingProvider(TracerProvider):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.flushes += 1
        return super().force_flush(timeout_millis)


async def test_end_of_input_flushes_and_sigterm_handler_is_installed_and_restored(pair: Any) -> None:
    provider = _CountingProvider()
    instrumentor = AcpInstrumentor()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    instrumentor.instrument(tracer_provider=provider)
    try:
        p = await pair()
        await initialize(p.client_conn)  # a round trip: both receive loops are running
        assert signal.getsignal(signal.SIGTERM) is instrumentor._state.sigterm_handler
        for writer in p._writers:  # the peer goes away: both receive loops reach end of input
            writer.close()
        await wait_until(lambda: provider.flushes >= 1, what="a flush at end of input")
    finally:
        instrumentor.uninstrument()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


async def test_application_sigterm_handler_is_left_alone(provider: TracerProvider, pair: Any) -> None:
    def mine(signum: int, frame: Any) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        p = await pair()
        await initialize(p.client_conn)  # a round trip: both receive loops are running
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        instrumentor.uninstrument()
        assert signal.getsignal(signal.SIGTERM) is mine
        signal.signal(signal.SIGTERM, previous)


def test_flush_is_bounded() -> None:
    """A flush that never ends (an exporter stuck in a call) does not hold the caller: flush() returns False
    while it is still stuck (no timing: an unbounded flush would never return)."""
    release = threading.Event()

    class Stuck:
        def force_flush(self, timeout_millis: int) -> bool:
            release.wait()  # ignores its timeout, as a stuck exporter does
            return True

    try:
        assert shutdown.flush(Stuck(), 0.2) is False  # returned, though the flush is still stuck
    finally:
        release.set()


_VICTIM = """
import asyncio, os, signal, sys, threading
from acp_app import Pair, TraceAgent, TraceClient, initialize
from opentelemetry.sdk.trace import TracerProvider
from acp_otel import AcpInstrumentor

MARKER, MODE = sys.argv[1], sys.argv[2]

class P(TracerProvider):
    def force_flush(self, timeout_millis=30000):
        open(MARKER, "w").write(str(timeout_millis))
        if MODE == "stuck":  # an exporter that cannot get rid of its spans in time
            __import__("time").sleep(5)
        return True

async def main():
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=P())
    pair = await Pair(TraceAgent(), TraceClient()).start()
    await initialize(pair.client_conn)  # the receive loops run on the main thread: our handler is installed
    assert signal.getsignal(signal.SIGTERM) is instrumentor._state.sigterm_handler
    await pair.close()
    return instrumentor

instrumentor = asyncio.run(main())
if MODE == "uninstrumented-elsewhere":
    # No event loop runs any more: the handler cannot be taken off from another thread, so it stays, inert.
    worker = threading.Thread(target=instrumentor.uninstrument)
    worker.start()
    worker.join()
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
if os.path.exists(MARKER):
    os.remove(MARKER)  # only a flush on SIGTERM counts
print("ready", flush=True)
signal.pause() if hasattr(signal, "pause") else __import__("time").sleep(30)
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM semantics are POSIX")
@pytest.mark.parametrize("mode", ["instrumented", "uninstrumented-elsewhere"])
def test_sigterm_exit_status_is_unchanged(tmp_path: Any, mode: str) -> None:
    """A process killed by SIGTERM while our handler is installed still dies of SIGTERM (-15): after a flush
    while instrumented, with no flush once uninstrumented (from a thread that could not restore SIG_DFL)."""
    marker = tmp_path / "flushed"
    proc = subprocess.Popen(
        [sys.executable, "-c", _VICTIM, str(marker), mode],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **peer_env()},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.terminate()
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    if mode == "instrumented":
        assert marker.read_text() == str(int(shutdown.FLUSH_TIMEOUT_S * 1000))
    else:
        assert not marker.exists()


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM semantics are POSIX")
def test_sigterm_with_a_flush_that_does_not_finish_says_one_line(tmp_path: Any) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _VICTIM, str(tmp_path / "flushed"), "stuck"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **peer_env()},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        proc.terminate()
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr is not None
    # (an API before 1.30 adds its one start-up warning about the histograms' bucket advisory: not this test's)
    said = [line for line in proc.stderr.read().splitlines(keepends=True) if "bucket advisory" not in line]
    assert "".join(said) == shutdown.SIGTERM_NOT_FLUSHED
