"""Running ``acp-otel proxy`` as a real process in the tests: commands, environments, an SDK client over it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PEERS = Path(__file__).resolve().parent
TESTS = PEERS.parent
REPO = TESTS.parent
TS_AGENT_DIR = TESTS / "ts_agent"
RAW_PEER = [sys.executable, str(PEERS / "raw_peer.py")]
PROXY = [sys.executable, "-m", "acp_otel.cli", "proxy"]
PY_AGENT = [sys.executable, str(TESTS / "peers" / "trace_agent.py")]


def base_env(**extra: str) -> dict[str, str]:
    """This environment without OTEL_* / test variables, tests/support and the repo on PYTHONPATH, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "ACP_OTEL_TEST_SPANS"}
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS / "support"), str(REPO)])
    env.update(extra)
    return env


def untraced_env(**extra: str) -> dict[str, str]:
    """An environment in which the proxy exports nothing (traces and metrics off: each has its own switch)."""
    return base_env(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", **extra)


def ts_agent_command() -> list[str]:
    """``node tests/ts_agent/agent.mjs``, installing the SDK from the lock file first (``npm ci``) if needed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        import pytest

        pytest.skip("node and npm are needed for the TypeScript SDK agent")
    if not (TS_AGENT_DIR / "node_modules" / "@agentclientprotocol" / "sdk" / "package.json").exists():
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=TS_AGENT_DIR, check=True, timeout=300
        )
    return [node, str(TS_AGENT_DIR / "agent.mjs")]


@dataclass
class Proxied:
    """An SDK client connected to an agent through a proxy process (results filled in after the block)."""

    proc: asyncio.subprocess.Process
    conn: Any
    client: Any
    returncode: int | None = None
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def proxied_client(
    agent: list[str], env: dict[str, str], proxy_args: list[str] | None = None, client: Any = None
) -> AsyncIterator[Proxied]:
    """Start ``acp-otel proxy [proxy_args] -- agent`` and connect an SDK ``ClientSideConnection`` to it.

    Leaving the block closes the proxy's stdin and waits (bounded) for it to exit.
    """
    from acp import ClientSideConnection
    from acp_app import TraceClient

    app = client if client is not None else TraceClient()
    with tempfile.TemporaryFile() as stderr:
        proc = await asyncio.create_subprocess_exec(
            *PROXY,
            *(proxy_args or []),
            "--",
            *agent,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env,
            limit=2**24,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proxied = Proxied(proc, ClientSideConnection(lambda _conn: app, proc.stdin, proc.stdout), app)
        try:
            yield proxied
        finally:
            with contextlib.suppress(Exception):
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
            proxied.returncode = proc.returncode
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proxied.conn.close(), 5)
            stderr.seek(0)
            proxied.stderr = stderr.read().decode("utf-8", "replace")
