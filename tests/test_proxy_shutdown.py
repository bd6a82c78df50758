"""Shutting down through the proxy with real processes: agents whose wrapper forwards no signal, the SDK's
editor shutdown sequence, an acpx-like quick kill, the proxy SIGKILLed, and an agent whose child holds its
stdout after it exited.

The agents have the shape of codex-acp's (a wrapper that forwards no signal, in front of a child that
inherits the stdio, ignores end of input and outlives the wrapper). Each timing is compared with the same
agent without the proxy, measured in the same test; no absolute figure is asserted.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from acp_app import TraceClient, open_session, prompt
from harness import PEERS, PROXY, base_env
from otlp_sink import OtlpSink, Span

from acp_otel._proxy import framing

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes through /proc (Linux)"),
    pytest.mark.timeout(300),
]

MARK = "ACP_OTEL_TEST_PROCESS_MARK"
# A shell wrapper as in the field (`sh -c` without `exec`): SIGTERM kills the outer shell only; the inner
# one ignores end of input (after `cat`) and holds the editor's stdout and stderr.
SH_AGENT = ["sh", "-c", "sh -c 'cat >/dev/null; sleep 25'"]
LINGER_S = "20"
PY_AGENT = [sys.executable, str(PEERS / "lingering_agent.py"), "wrapper", LINGER_S]
# Generous: only a slower shutdown by whole seconds (an editor waiting out its timeouts, or hanging on a
# pipe an orphan holds until it exits, 20 s and more here) must fail.
MARGIN_S = 3.0
# The batch processor exports once a second: the first export, during the session's warm-up pause, builds
# the OTLP exporter (its imports take up to a second on a loaded machine, which the flush after a SIGTERM
# must not have to pay); the turn that follows is exported by the proxy's flush at exit (acpx-like editor)
# or, during the SDK editor's 2 s wait for end of input, by the schedule.
EXPORT_SCHEDULE = {"OTEL_BSP_SCHEDULE_DELAY": "1000"}
WARM_UP_S = 1.5


def traced_env(sink: OtlpSink) -> dict[str, str]:
    return base_env(**{**sink.env(), **EXPORT_SCHEDULE})


def marked(mark: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries ``mark``: the agent, its children, the proxy."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or a zombie
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def kill_marked(mark: str) -> None:
    for pid in marked(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def mark() -> Iterator[str]:
    """A fresh process mark; whatever still carries it at the end is SIGKILLed."""
    value = uuid.uuid4().hex
    try:
        yield value
    finally:
        kill_marked(value)


@pytest.fixture
def sink() -> Any:
    with OtlpSink() as s:
        yield s


def is_turn(span: Span) -> bool:
    return span.attributes.get("gen_ai.operation.name") == "invoke_agent"


async def editor_session(command: list[str], env: dict[str, str], converse: bool) -> float:
    """The SDK's editor (``acp.spawn_agent_process``) runs ``command``; returns how long leaving it took.

    Leaving runs the SDK's own shutdown: close stdin, wait, SIGTERM, wait, SIGKILL, wait.
    """
    import acp

    client = TraceClient()
    async with acp.spawn_agent_process(lambda _agent: client, command[0], *command[1:], env=env) as (conn, _proc):
        if converse:
            session_id = await open_session(conn)
            await asyncio.sleep(WARM_UP_S)
            result = await prompt(conn, session_id, "hello")
            assert result.stop_reason == "end_turn"
        started = time.monotonic()
    return time.monotonic() - started


async def shutdown_seconds(command: list[str], env: dict[str, str], mark: str, converse: bool) -> tuple[float, int]:
    """``editor_session`` bounded; then how many processes of the run are left, which are then killed."""
    seconds = await asyncio.wait_for(editor_session(command, {**env, MARK: mark}, converse), 120)
    left = len(marked(mark))
    kill_marked(mark)
    await asyncio.sleep(0.5)  # the loop sees end of file on the pipes the orphans held (no transport left open)
    return seconds, left


async def test_sh_wrapper_shutdown_is_no_slower_through_the_proxy(mark: str, sink: OtlpSink) -> None:
    """`sh -c "sh -c '...'"`: the SDK editor's exit takes no longer through the proxy than without it, and the
    editor's SIGTERM, forwarded to the agent's process group, leaves nothing of the agent running."""
    direct_s, direct_left = await shutdown_seconds(SH_AGENT, base_env(), mark + "d", converse=False)
    env = traced_env(sink)
    proxied_s, proxied_left = await shutdown_seconds([*PROXY, "--", *SH_AGENT], env, mark, converse=False)
    assert direct_left >= 1  # the shape is right: without the proxy, the inner shell outlives the wrapper
    assert proxied_left == 0  # the whole agent got the SIGTERM, as a terminal's Ctrl-C would give it
    assert proxied_s <= direct_s + MARGIN_S, (proxied_s, direct_s)


async def test_acp_agent_behind_wrapper_shutdown_and_spans(mark: str, sink: OtlpSink) -> None:
    """An ACP agent behind a wrapper that forwards no signal, whose child ignores SIGTERM and end of input:
    the SDK editor's exit is no slower through the proxy, the proxy does not outlive it, and the turn's
    spans reach the collector although the proxy was terminated."""
    direct_s, direct_left = await shutdown_seconds(PY_AGENT, base_env(), mark + "d", converse=True)
    env = traced_env(sink)
    proxied_s, proxied_left = await shutdown_seconds(
        [*PROXY, "--service-name", "lifecycle-proxy", "--", *PY_AGENT], env, mark, converse=True
    )
    assert direct_left == 1  # the child outlives its wrapper without the proxy: the shape is right
    assert proxied_left <= direct_left  # the same child at most, never the proxy
    assert proxied_s <= direct_s + MARGIN_S, (proxied_s, direct_s)
    spans = sink.wait_for(lambda s: any(is_turn(x) and x.service == "lifecycle-proxy" for x in s), timeout=20)
    (turn,) = [s for s in spans if is_turn(s)]
    assert turn.status == "UNSET" and turn.attributes["acp.stop_reason"] == "end_turn"
    assert {"initialize", "session/new"} <= {s.name for s in spans}


async def acpx_like_exit(mark: str, env: dict[str, str], terminate: list[str]) -> tuple[int, float]:
    """An acpx-like editor: a turn, then close stdin, SIGTERM 100 ms later, SIGKILL 1.5 s after that.

    ``terminate``: whom the SIGTERM goes to, ``proxy`` only or the whole ``tree`` at once. Returns the
    proxy's exit status and how long after the SIGTERM it exited.
    """
    from acp import ClientSideConnection

    client = TraceClient()
    with tempfile.TemporaryFile() as stderr:
        proc = await asyncio.create_subprocess_exec(
            *PROXY,
            "--service-name",
            "acpx-proxy",
            "--",
            *PY_AGENT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**env, MARK: mark},
        )
        assert proc.stdin is not None and proc.stdout is not None
        conn = ClientSideConnection(lambda _agent: client, proc.stdin, proc.stdout)
        session_id = await asyncio.wait_for(open_session(conn), 60)
        await asyncio.sleep(WARM_UP_S)
        result = await asyncio.wait_for(prompt(conn, session_id, "hello"), 60)
        assert result.stop_reason == "end_turn"
        proc.stdin.close()
        await asyncio.sleep(0.1)
        terminated = time.monotonic()
        targets = marked(mark) if "tree" in terminate else [proc.pid]
        for pid in targets:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            await asyncio.wait_for(proc.wait(), 1.5)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        exited = time.monotonic() - terminated
        await asyncio.wait_for(conn.close(), 5)
        await asyncio.wait_for(proc.stdout.read(), 10)  # end of file: the transport finishes inside the loop
    assert proc.returncode is not None
    return proc.returncode, exited


@pytest.mark.parametrize("terminate", ["proxy", "tree"])
async def test_acpx_like_kill_loses_no_spans(mark: str, sink: OtlpSink, terminate: str) -> None:
    """SIGTERM 100 ms after end of input, SIGKILL 1.5 s later: the proxy exits before the SIGKILL (dying of
    the agent's SIGTERM) and its spans, flushed at exit, reach the collector."""
    returncode, _seconds = await acpx_like_exit(mark, traced_env(sink), [terminate])
    assert returncode == -signal.SIGTERM  # not -SIGKILL: the proxy finished before acpx's SIGKILL
    spans = sink.wait_for(lambda s: any(is_turn(x) for x in s), timeout=20)
    assert {"initialize", "session/new"} <= {s.name for s in spans}
    (turn,) = [s for s in spans if is_turn(s)]
    assert turn.service == "acpx-proxy" and turn.attributes["acp.stop_reason"] == "end_turn"


def test_sigkilled_proxy_takes_the_agent_with_it(mark: str) -> None:
    """The editor SIGKILLs the proxy: the agent (which ignores SIGTERM and end of input) dies with it, as it
    would have died of that SIGKILL without the proxy, instead of holding the editor's stderr."""
    agent = [sys.executable, str(PEERS / "lingering_agent.py"), "child", "60"]
    proc = subprocess.Popen(
        [*PROXY, "--", *agent],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", **{MARK: mark}),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}\n')
        proc.stdin.flush()
        assert b'"result"' in proc.stdout.readline()  # the agent runs
        (agent_pid,) = [pid for pid in marked(mark) if pid != proc.pid]
        proc.kill()
        proc.wait(20)
        deadline = time.monotonic() + 30
        while agent_pid in marked(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent_pid not in marked(mark)
    finally:
        proc.kill()
        proc.communicate()


def test_agent_exit_ends_the_proxy_while_its_child_holds_stdout(mark: str) -> None:
    """The agent prints a line and exits 3, leaving a child that holds its stdout and writes again later: the
    proxy relays the line, exits 3 without waiting for end of file, and is gone before the late write."""
    agent = ["sh", "-c", '(sleep 1.5; echo late-output) & echo \'{"jsonrpc":"2.0","method":"bye"}\'; exit 3']
    proc = subprocess.Popen(
        [*PROXY, "--", *agent],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", **{MARK: mark}),
    )
    try:
        assert proc.wait(30) == 3  # stdin still open: the agent's exit alone ends the proxy
        assert proc.stdout is not None
        out = proc.stdout.read()
        assert out == b'{"jsonrpc":"2.0","method":"bye"}\n'  # relayed; the child's later write is not waited for
    finally:
        proc.kill()
        proc.communicate()


def test_agent_output_is_relayed_whole_though_its_child_holds_stdout(mark: str) -> None:
    """The agent writes 4 MB (far more than a pipe holds) and exits at once, leaving a child that holds its
    stdout: the proxy relays every byte (and the final line without newline) before it exits."""
    writer = "import sys; sys.stdout.write(('x' * 999 + '\\n') * 4096 + 'tail')"
    agent = ["sh", "-c", f'sleep 30 & {sys.executable} -c "{writer}"; exit 0']
    proc = subprocess.Popen(
        [*PROXY, "--", *agent],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", **{MARK: mark}),
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.close()  # the agent does not read it
        out = proc.stdout.read()  # to the proxy's exit (the child holds the agent's stdout, not the proxy's)
        assert proc.wait(60) == 0
        assert out == (b"x" * 999 + b"\n") * 4096 + b"tail"
        assert any(pid != proc.pid for pid in marked(mark))  # the child still holds the pipe: no end of file came
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_pump_ends_on_an_empty_non_blocking_source_with_the_partial_line() -> None:
    """A source made non-blocking (the agent exited) ends the relay when it is empty, though a writer still
    holds it open; a final line without newline is forwarded as at end of file."""
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    try:
        os.write(src_w, b'{"a":1}\n{"partial"')
        os.set_blocking(src_r, False)
        state = framing.PumpState()
        handled: list[bytes] = []

        def handle(line: bytes) -> tuple[bytes, None]:
            handled.append(line)
            return line, None

        framing.pump(src_r, dst_w, handle, 1024, state)  # returns: src_w is still open
        assert os.read(dst_r, 1024) == b'{"a":1}\n{"partial"'
        assert handled == [b'{"a":1}', b'{"partial"']
        assert state.reads >= 2 and not state.waiting
    finally:
        for fd in (src_r, src_w, dst_r, dst_w):
            os.close(fd)


def test_drain_relays_what_the_agent_left_and_never_waits_for_end_of_file() -> None:
    """After the agent's exit: lines still being traced are all relayed, and a relay blocked on an empty pipe
    that a child of the agent holds open is not waited for (the write end stays open throughout)."""
    from acp_otel._proxy import process

    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    lines = [b'{"n":%d}' % i for i in range(10)]
    os.write(src_w, b"\n".join(lines) + b"\n")

    def slow(line: bytes) -> tuple[bytes, None]:
        time.sleep(0.05)  # tracing that takes a while: the lines are in the relay's hands, not in the pipe
        return line, None

    src = os.fdopen(src_r, "rb", buffering=0)
    state = framing.PumpState()
    relay = threading.Thread(target=framing.pump, args=(src.fileno(), dst_w, slow, 1024, state), daemon=True)
    relay.start()
    try:
        while state.reads == 0:  # the relay holds the lines
            time.sleep(0.001)
        process._drain(relay, state, src, threading.Lock(), 60.0)
        relayed = os.read(dst_r, 65536) if select.select([dst_r], [], [], 0)[0] else b""
        assert relayed == b"\n".join(lines) + b"\n"  # all relayed before _drain returned

        # A relay blocked in a read of an empty pipe whose write end stays open: nothing in hand, so _drain
        # returns (well before its 60 s), without the end of file that never comes.
        empty_r, empty_w = os.pipe()
        idle = framing.PumpState()
        blocked = threading.Thread(target=framing.pump, args=(empty_r, dst_w, None, 1024, idle), daemon=True)
        blocked.start()
        while not idle.waiting:
            time.sleep(0.001)
        time.sleep(0.5)  # in the read by now
        started = time.monotonic()
        process._drain(blocked, idle, os.fdopen(empty_r, "rb", buffering=0, closefd=False), threading.Lock(), 60.0)
        assert time.monotonic() - started < 30
        os.close(empty_w)  # end of file: the relay ends
        blocked.join(10)
        os.close(empty_r)
    finally:
        os.close(src_w)
        relay.join(10)
        src.close()
        for fd in (dst_r, dst_w):
            os.close(fd)
