"""A minimal ACP agent/client pair on the real SDK, connected by a loopback TCP stream (real NDJSON).

The benchmarks' own app (they do not import ``tests/``). The prompt text says what the agent does:
``k=<n>`` streams ``n`` ``session/update`` notifications before answering; ``error`` answers with a
JSON-RPC error; ``raise`` makes the handler raise; ``slow`` waits until cancelled. Handlers take keyword
arguments and plain dicts only, which every supported SDK release accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from acp import AgentSideConnection, ClientSideConnection
from acp.exceptions import RequestError

__all__ = ["PROTOCOL_VERSION", "BenchAgent", "BenchClient", "BenchPair", "text_block", "text_of"]

PROTOCOL_VERSION = 1
CLIENT_INFO = {"name": "bench-client", "version": "1.0.0"}
AGENT_INFO = {"name": "bench-agent", "version": "1.0.0"}


def text_block(text: str) -> dict[str, str]:
    """A text content block for a prompt."""
    return {"type": "text", "text": text}


def text_of(prompt: Any) -> str:
    """The text of a prompt's blocks (pydantic models or dicts, depending on the SDK release)."""
    parts = []
    for block in prompt or []:
        text = getattr(block, "text", None)
        if text is None and isinstance(block, dict):
            text = block.get("text")
        if text:
            parts.append(text)
    return " ".join(parts)


def _chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


class BenchAgent:
    """Answers initialize / session/new and streams ``k`` chunks per prompt."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.sessions = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> dict[str, Any]:
        capabilities = {"loadSession": False}
        return {"protocolVersion": PROTOCOL_VERSION, "agentCapabilities": capabilities, "agentInfo": AGENT_INFO}

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> dict[str, Any]:
        self.sessions += 1
        return {"sessionId": f"sess-{self.sessions}"}

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        text = text_of(prompt)
        if text.startswith("k="):
            for _ in range(int(text[2:])):
                await self.conn.session_update(session_id=session_id, update=_chunk("tok "))
            return {"stopReason": "end_turn"}
        if text == "error":
            raise RequestError.invalid_params({"why": "bench"})
        if text == "raise":
            raise ValueError("bench handler failure")
        if text == "slow":
            await asyncio.sleep(3600)
        return {"stopReason": "end_turn"}


class BenchClient:
    """Counts the updates it is sent."""

    def __init__(self) -> None:
        self.updates = 0

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1


class BenchPair:
    """A client and agent over one loopback TCP socket, initialized and with one session open."""

    def __init__(self, agent: Any = None) -> None:
        self.agent = agent if agent is not None else BenchAgent()
        self.client = BenchClient()
        self.client_conn: Any = None
        self.agent_conn: Any = None
        self.session_id = ""
        self._server: asyncio.AbstractServer | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> BenchPair:
        ready = asyncio.Event()

        async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._writers.append(writer)
            self.agent_conn = AgentSideConnection(lambda conn: self.agent, writer, reader)
            ready.set()

        self._server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        self._writers.append(writer)
        self.client_conn = ClientSideConnection(lambda conn: self.client, writer, reader)
        await asyncio.wait_for(ready.wait(), 5)
        from acp import schema

        try:  # peers that name themselves put their name/version on every span: the realistic case
            info = schema.Implementation.model_validate(CLIENT_INFO)
            await self.client_conn.initialize(protocol_version=PROTOCOL_VERSION, client_info=info)
        except TypeError:  # releases whose initialize() takes no client_info
            await self.client_conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await self.client_conn.new_session(cwd="/tmp", mcp_servers=[])
        self.session_id = session.session_id
        return self

    async def prompt(self, text: str) -> Any:
        return await self.client_conn.prompt(session_id=self.session_id, prompt=[text_block(text)])

    async def close(self) -> None:
        for conn in (self.client_conn, self.agent_conn):
            if conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 5)
        for writer in self._writers:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)
        if self._server is not None:
            self._server.close()
