"""A minimal ACP agent/client pair on the real SDK, connected by a loopback TCP stream (real NDJSON).

Shared by the benchmarks; the connection pair itself is the tests' ``Pair`` (tests/support/acp_app.py). The prompt
text says what the agent does: ``k=<n>`` streams ``n`` ``session/update`` notifications before answering;
``error`` answers with a JSON-RPC error; ``raise`` makes the handler raise; ``slow`` waits until cancelled.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from acp.exceptions import RequestError

# The tests' client/agent pair and helpers (tests/support/acp_app.py); plain dicts work on every supported SDK.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support"))

from acp_app import PROTOCOL_VERSION, Pair, _chunk, _text_of

__all__ = ["PROTOCOL_VERSION", "BenchAgent", "BenchClient", "BenchPair", "_text_of", "text_block"]


def text_block(text: str) -> dict[str, str]:
    """A text content block for a prompt."""
    return {"type": "text", "text": text}


class BenchAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.sessions = 0

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> dict[str, Any]:
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {"loadSession": False},
            "agentInfo": {"name": "bench-agent", "version": "1.0.0"},
        }

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> dict[str, Any]:
        self.sessions += 1
        return {"sessionId": f"sess-{self.sessions}"}

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None

    async def prompt(self, prompt: Any, session_id: str, **kwargs: Any) -> dict[str, Any]:
        text = _text_of(prompt)
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
    def __init__(self) -> None:
        self.updates = 0

    def on_connect(self, conn: Any) -> None:
        pass

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates += 1


class BenchPair(Pair):
    """The tests' :class:`Pair` (one loopback TCP socket), initialized and with one session open."""

    def __init__(self, agent: Any = None) -> None:
        super().__init__(agent if agent is not None else BenchAgent(), BenchClient())
        self.session_id = ""

    async def start(self) -> BenchPair:
        await super().start()
        await self.client_conn.initialize(protocol_version=PROTOCOL_VERSION)
        session = await self.client_conn.new_session(cwd="/tmp", mcp_servers=[])
        self.session_id = session.session_id
        return self

    async def prompt(self, text: str) -> Any:
        return await self.client_conn.prompt(session_id=self.session_id, prompt=[text_block(text)])
