"""Peer process for the fault tests.

``python tests/peers/fault_client.py client PORT``: a client that connects to an agent on 127.0.0.1:PORT,
starts a prompt turn and dies (``os._exit``) as soon as the agent asks it for permission.

(The agent side of the fault tests is ``trace_agent.py`` with ``ACP_OTEL_TEST_SPANS=otlp``.)
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

# Run as a script: find the support modules.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))


class DyingClient:
    def __init__(self) -> None:
        from acp_app import TraceClient

        self._inner = TraceClient()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def request_permission(self, **kwargs: Any) -> Any:
        os._exit(4)  # the client process dies with the agent's request pending


async def run_client(port: int) -> None:
    from acp import ClientSideConnection
    from acp_app import initialize, prompt

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    conn = ClientSideConnection(lambda c: DyingClient(), writer, reader)
    await initialize(conn)
    session = await conn.new_session(cwd="/tmp", mcp_servers=[])
    await prompt(conn, session.session_id, "hello")


if __name__ == "__main__":
    assert sys.argv[1] == "client", sys.argv
    asyncio.run(run_client(int(sys.argv[2])))
