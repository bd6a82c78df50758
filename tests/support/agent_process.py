"""An agent process (``tests/peers/trace_agent.py``) spawned over stdio pipes, with a client connection in this process.

    async with agent_process("nokwargs", env={...}) as agent:
        await initialize(agent.conn)
    agent.returncode, agent.exit_s, agent.stdout, agent.stderr   # after the block: the process has ended

Leaving the block closes the agent's stdin (end of input), waits for the process to exit (bounded; it is
killed after ``exit_timeout``), then closes the connection. Every byte the agent wrote to stdout is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from paths import TRACE_AGENT, peer_env


class _Tee:
    """Feeds the agent's stdout to the SDK while keeping every raw byte for inspection."""

    def __init__(self, source: asyncio.StreamReader) -> None:
        self.reader = asyncio.StreamReader(limit=2**24)
        self.raw = bytearray()
        self.task = asyncio.create_task(self._pump(source))

    async def _pump(self, source: asyncio.StreamReader) -> None:
        try:
            while chunk := await source.read(65536):
                self.raw.extend(chunk)
                self.reader.feed_data(chunk)
        finally:
            self.reader.feed_eof()


@dataclass
class AgentProcess:
    proc: asyncio.subprocess.Process
    conn: Any
    returncode: int | None = None
    exit_s: float = 0.0  # from end of input (or the block's end) to the process's exit
    killed: bool = False
    stdout: bytes = b""
    stderr: str = ""
    _tee: Any = field(default=None, repr=False)


@contextlib.asynccontextmanager
async def agent_process(
    *args: str, env: dict[str, str] | None = None, client: Any = None, exit_timeout: float = 10.0
) -> AsyncIterator[AgentProcess]:
    """``python trace_agent.py *args`` with ``env`` added to this environment."""
    from acp import ClientSideConnection
    from acp_app import TraceClient

    full_env = {k: v for k, v in os.environ.items() if k != "ACP_OTEL_TEST_SPANS"}  # uninstrumented unless env= says
    full_env.update(peer_env(env))
    with tempfile.TemporaryFile() as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(TRACE_AGENT),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=full_env,
        )
        assert proc.stdin is not None and proc.stdout is not None
        tee = _Tee(proc.stdout)
        app = client if client is not None else TraceClient()
        agent = AgentProcess(proc, ClientSideConnection(lambda _conn: app, proc.stdin, tee.reader), _tee=tee)
        try:
            yield agent
        finally:
            t0 = time.perf_counter()
            with contextlib.suppress(Exception):
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), exit_timeout)
            except asyncio.TimeoutError:
                agent.killed = True
                proc.kill()
                await proc.wait()
            agent.exit_s = time.perf_counter() - t0
            agent.returncode = proc.returncode
            with contextlib.suppress(Exception):
                await asyncio.wait_for(agent.conn.close(), 5)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(tee.task, 5)
            agent.stdout = bytes(tee.raw)
            stderr.seek(0)
            agent.stderr = stderr.read().decode("utf-8", "replace")
