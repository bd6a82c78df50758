"""Shutting down through the proxy with real processes: agents whose wrapper forwards no signal, the SDK's
editor shutdown sequence, an acpx-like quick kill, the proxy SIGKILLed, and an agent whose child holds its
stdout after it exited.

The agents have the shape of codex-acp's (a wrapper that forwards no signal, in front of a child that
inherits the stdio, ignores end of input and outlives the wrapper). Shutdown is judged by what the proxy did
(it ended, of the forwarded signal, before the editor's SIGKILL; the editor did not wait for the agent's
orphan), not by comparing times with a margin; the same agent without the proxy shows the shape is right.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
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
from pathlib import Path
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
# An editor that waited for the agent's orphan (which lingers 20 s or 25 s after end of input, holding the
# stdio it inherited) would take that long to leave; leaving through the proxy takes about 2 s (the SDK's
# wait before its SIGTERM) plus the proxy's exit. Only the first must fail, on any machine.
ORPHAN_WAIT_S = 10.0
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


async def editor_session(command: list[str], env: dict[str, str], converse: bool) -> tuple[float, int | None]:
    """The SDK's editor (``acp.spawn_agent_process``) runs ``command``; returns how long leaving it took, and
    the exit status of ``command`` (``-SIGTERM``: it ended of the SDK's SIGTERM; ``-SIGKILL``: the SDK had to
    kill it, 2 s later).

    Leaving runs the SDK's own shutdown: close stdin, wait 2 s, SIGTERM, wait 2 s, SIGKILL, wait.
    """
    import acp

    client = TraceClient()
    async with acp.spawn_agent_process(lambda _agent: client, command[0], *command[1:], env=env) as (conn, proc):
        if converse:
            session_id = await open_session(conn)
            await asyncio.sleep(WARM_UP_S)
            result = await prompt(conn, session_id, "hello")
            assert result.stop_reason == "end_turn"
        started = time.monotonic()
    return time.monotonic() - started, proc.returncode


async def shutdown_seconds(
    command: list[str], env: dict[str, str], mark: str, converse: bool
) -> tuple[float, int, int | None]:
    """``editor_session`` bounded; then how many processes of the run are left, which are then killed."""
    seconds, returncode = await asyncio.wait_for(editor_session(command, {**env, MARK: mark}, converse), 120)
    left = len(marked(mark))
    kill_marked(mark)
    await asyncio.sleep(0.5)  # the loop sees end of file on the pipes the orphans held (no transport left open)
    return seconds, left, returncode


async def test_sh_wrapper_shutdown_through_the_proxy_ends_the_whole_agent(mark: str, sink: OtlpSink) -> None:
    """`sh -c "sh -c '...'"`: the editor's SIGTERM, forwarded to the agent's process group, leaves nothing of
    the agent running; the proxy ends of it before the editor's SIGKILL, and the editor does not wait for the
    inner shell (which, without the proxy, outlives the wrapper)."""
    _direct_s, direct_left, direct_status = await shutdown_seconds(SH_AGENT, base_env(), mark + "d", converse=False)
    env = traced_env(sink)
    proxied_s, proxied_left, status = await shutdown_seconds([*PROXY, "--", *SH_AGENT], env, mark, converse=False)
    assert direct_left >= 1  # the shape is right: without the proxy, the inner shell outlives the wrapper
    assert proxied_left == 0  # the whole agent got the SIGTERM, as a terminal's Ctrl-C would give it
    assert status == direct_status == -signal.SIGTERM  # the proxy ended as the agent did: not SIGKILLed 2 s later
    assert proxied_s < ORPHAN_WAIT_S, proxied_s


async def test_acp_agent_behind_wrapper_shutdown_and_spans(mark: str, sink: OtlpSink) -> None:
    """An ACP agent behind a wrapper that forwards no signal, whose child ignores SIGTERM and end of input:
    the proxy ends of the editor's SIGTERM before its SIGKILL, the editor does not wait for the child, and the
    turn's spans reach the collector although the proxy was terminated."""
    _direct_s, direct_left, direct_status = await shutdown_seconds(PY_AGENT, base_env(), mark + "d", converse=True)
    env = traced_env(sink)
    proxied_s, proxied_left, status = await shutdown_seconds(
        [*PROXY, "--service-name", "lifecycle-proxy", "--", *PY_AGENT], env, mark, converse=True
    )
    assert direct_left == 1  # the child outlives its wrapper without the proxy: the shape is right
    assert proxied_left <= direct_left  # the same child at most, never the proxy
    assert status == direct_status == -signal.SIGTERM  # the proxy ended as the wrapper did: not SIGKILLed 2 s later
    assert proxied_s < ORPHAN_WAIT_S, proxied_s  # the editor did not wait for the child that holds its stderr
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


def test_a_last_line_without_newline_is_relayed_though_a_child_holds_stdout(mark: str) -> None:
    """The agent's last line has no newline, the relay is already waiting for the rest when the agent exits,
    and a child of the agent holds its stdout: the line is forwarded as at end of file, and the proxy exits."""
    line = b'{"jsonrpc":"2.0","method":"bye"}'
    # The pause: the relay has the line and waits in a read of the empty pipe before the agent exits.
    agent = ["sh", "-c", f"sleep 30 & printf '{line.decode()}'; sleep 0.5; exit 0"]
    proc = subprocess.Popen(
        [*PROXY, "--", *agent],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", **{MARK: mark}),
    )
    try:
        assert proc.wait(30) == 0
        assert proc.stdout is not None and proc.stdout.read() == line
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


# The agent's last output: several pipes' worth (a pipe holds 64 KiB, the relay reads 64 KiB at a time), so
# that when the agent exits, bytes are still in its pipe, in the relay's hands and in the proxy's stdout pipe;
# the last line has no newline.
LAST_OUTPUT = (
    b"".join(b'{"jsonrpc":"2.0","method":"last","params":{"n":%d,"pad":"%s"}}\n' % (n, b"x" * 180) for n in range(900))
    + b'{"jsonrpc":"2.0","method":"end"}'
)
EDITOR_READ_BYTES = 16384
EDITOR_PAUSE_S = 0.01  # between reads: 64 KiB in 40 ms, well inside the proxy's 0.5 s idle bound


def test_agent_last_output_reaches_a_slow_editor_whole_every_time(tmp_path: Path, mark: str) -> None:
    """The agent writes its last lines (more than a pipe holds) and exits at once, while the editor reads at
    its own pace, a few KiB at a time: every byte reaches the editor, every time (20 runs). Without the
    proxy's drain after the agent's exit, what was still in the pipes is lost in every run."""
    assert len(LAST_OUTPUT) > 3 * 65536
    payload = tmp_path / "last-output"
    payload.write_bytes(LAST_OUTPUT)
    env = base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", **{MARK: mark})
    for run in range(20):
        proc = subprocess.Popen(
            [*PROXY, "--", "cat", str(payload)],  # cat: writes and exits at once, as soon as its last write is in
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        out = bytearray()
        try:
            while chunk := os.read(proc.stdout.fileno(), EDITOR_READ_BYTES):
                out += chunk
                time.sleep(EDITOR_PAUSE_S)
            assert proc.wait(30) == 0
        finally:
            proc.kill()
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()
        assert len(out) == len(LAST_OUTPUT), f"run {run}: {len(out)} of {len(LAST_OUTPUT)} bytes reached the editor"
        assert out == LAST_OUTPUT, f"run {run}"


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
        # wakes it (its read, interrupted, is retried non-blocking and ends the relay) and returns, without
        # the end of file that never comes, nor its idle bound (60 s) or its cap (60 s).
        empty_r, empty_w = os.pipe()
        idle = framing.PumpState()
        blocked = threading.Thread(target=framing.pump, args=(empty_r, dst_w, None, 1024, idle), daemon=True)
        blocked.start()
        while not idle.waiting:
            time.sleep(0.001)
        time.sleep(0.5)  # in the read by now
        started = time.monotonic()
        empty = os.fdopen(empty_r, "rb", buffering=0, closefd=False)
        process._drain(blocked, idle, empty, threading.Lock(), 60.0, 60.0)
        assert time.monotonic() - started < 30
        assert not blocked.is_alive()  # woken: it ended by itself, the write end still open
        os.close(empty_w)
        os.close(empty_r)
    finally:
        os.close(src_w)
        relay.join(10)
        src.close()
        for fd in (dst_r, dst_w):
            os.close(fd)


class _AgentPipes:
    """The agent's stdout (the read end as the proxy holds it, and the write end, which a child of the agent
    keeps open throughout) and the proxy's stdout pipe, with the test's threads on them."""

    def __init__(self) -> None:
        src_r, self.src_w = os.pipe()
        self.dst_r, self.dst_w = os.pipe()
        self.src = os.fdopen(src_r, "rb", buffering=0)
        self.stop = threading.Event()  # the writers stop
        self.writers: list[threading.Thread] = []
        self.readers: list[threading.Thread] = []  # they read dst_r until end of file
        self.relay: threading.Thread | None = None

    def close(self) -> None:
        """Stops every thread before its descriptor is closed (a descriptor closed under a thread may be reused)."""
        self.stop.set()
        relay = self.relay
        for step in ("writers", "eof"):
            while (step == "writers" and any(t.is_alive() for t in self.writers)) or (
                step == "eof" and relay is not None and relay.is_alive()
            ):
                if not self.readers and select.select([self.dst_r], [], [], 0.05)[0]:
                    os.read(self.dst_r, 1 << 20)  # unblocks a relay stuck in a write
                time.sleep(0.01)
            if step == "writers":
                os.close(self.src_w)  # end of file: the relay ends
        os.close(self.dst_w)  # end of file: the readers end
        for thread in self.readers:
            thread.join(10)
        self.src.close()
        os.close(self.dst_r)


@contextlib.contextmanager
def _agent_pipes() -> Iterator[_AgentPipes]:
    pipes = _AgentPipes()
    try:
        yield pipes
    finally:
        pipes.close()


def _start(target: Any, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _drain_returns(relay: threading.Thread, state: Any, src: Any, idle_s: float, cap_s: float) -> bool:
    """Runs the proxy's drain in the main thread, as the proxy does (a drain that never returns fails the test
    by its timeout)."""
    from acp_otel._proxy import process

    process._drain(relay, state, src, threading.Lock(), idle_s, cap_s)
    return True


@pytest.mark.timeout(30)
def test_drain_waits_for_a_slow_editor_past_the_idle_bound() -> None:
    """An editor that reads slowly (64 KiB every 0.1 s, 512 KiB in all: longer than the 0.5 s idle bound) gets
    every byte the agent wrote: the bound counts time without a read, not time since the agent's exit."""
    with _agent_pipes() as pipes:
        data = bytes(range(256)) * 2048
        fcntl.fcntl(pipes.src_w, fcntl.F_SETPIPE_SZ, len(data))  # all of it in the agent's pipe at its exit
        writer = _start(framing.write_all, pipes.src_w, data)
        pipes.writers.append(writer)
        state = framing.PumpState()
        relay = pipes.relay = _start(framing.pump, pipes.src.fileno(), pipes.dst_w, None, 1024, state)
        received = bytearray()

        def slow_editor() -> None:
            while chunk := os.read(pipes.dst_r, 65536):
                received.extend(chunk)
                time.sleep(0.1)

        pipes.readers.append(_start(slow_editor))
        writer.join(30)  # every byte is in the pipe or in the relay's hands: the agent has exited
        assert _drain_returns(relay, state, pipes.src, 0.5, 60.0)
        assert not relay.is_alive()  # the drain waited for the relay to finish
    assert received == data  # and the relay forwarded every byte


@pytest.mark.timeout(30)
def test_drain_gives_up_on_an_editor_that_does_not_read() -> None:
    """The editor does not read: the relay is stuck in a write, and the drain ends after the idle bound
    (0.3 s here), long before its cap (60 s)."""
    with _agent_pipes() as pipes:
        state = framing.PumpState()
        relay = pipes.relay = _start(framing.pump, pipes.src.fileno(), pipes.dst_w, None, 1024, state)
        pipes.writers.append(_start(framing.write_all, pipes.src_w, b"x" * (3 * 65536)))  # more than a pipe holds
        while not (state.reads and select.select([pipes.src], [], [], 0)[0]):
            time.sleep(0.01)  # the relay has taken a read and the agent's pipe is filling again
        assert _drain_returns(relay, state, pipes.src, 0.3, 60.0)
        assert relay.is_alive()  # left, stuck in its write


@pytest.mark.timeout(30)
def test_drain_gives_up_on_a_child_that_never_stops_writing() -> None:
    """A child of the agent goes on writing after the agent's exit, faster than the relay (slow tracing)
    forwards it: bytes keep arriving, and the drain ends at its cap (0.3 s here), long before its idle bound."""
    with _agent_pipes() as pipes:

        def slow_tracing(line: bytes) -> tuple[bytes, None]:
            time.sleep(0.005)
            return line, None

        def chatty() -> None:
            while not pipes.stop.is_set():
                framing.write_all(pipes.src_w, b"%s\n" % (b"c" * 500))

        def editor() -> None:
            while os.read(pipes.dst_r, 65536):
                pass

        pipes.writers.append(_start(chatty))
        pipes.readers.append(_start(editor))
        state = framing.PumpState()
        relay = pipes.relay = _start(framing.pump, pipes.src.fileno(), pipes.dst_w, slow_tracing, 1024, state)
        assert _drain_returns(relay, state, pipes.src, 60.0, 0.3)
        assert relay.is_alive()  # still relaying the child's output
