"""Example ACP agent over stdio: one scripted turn that exercises most of the protocol.

Run it through ``examples/client.py`` (which spawns it); on its own it just waits for
JSON-RPC on stdin. stdout carries the protocol, so everything human-readable goes to
stderr through ``logging``.

One ``session/prompt`` turn, in order:

1. a few ``agent_message_chunk`` updates,
2. a ``plan`` update,
3. tool call ``tool-search``: ``tool_call`` (pending) -> ``in_progress`` -> ``completed``,
4. tool call ``tool-fetch``: ``tool_call`` (pending) -> ``in_progress`` -> ``failed``,
5. tool call ``tool-read``: ``session/request_permission``, then on "allow"
   ``fs/read_text_file`` (``completed``), on anything else ``failed`` without reading,
6. ``_example.com/workspace/buffers`` (extension request), only if the client declared
   ``clientCapabilities._meta["example.com/workspace"]["buffers"] == true``,
7. ``_example.com/progress`` (extension notification),
8. a closing ``agent_message_chunk``, then ``stopReason: end_turn`` with (scripted) token ``usage``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from acp import (
    PROTOCOL_VERSION,
    Agent,
    Client,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
)
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
    ClientCapabilities,
    ContentToolCallContent,
    Implementation,
    PermissionOption,
    PlanEntry,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

AGENT_NAME = "example-agent"
AGENT_VERSION = "0.1.0"

# Extension namespace and capability shape (see examples/README.md). Per the ACP
# extensibility rules, extensions are advertised in the `_meta` of capability objects,
# keyed by a domain-like namespace, never as new root fields.
EXT_NAMESPACE = "example.com/workspace"
EXT_BUFFERS_METHOD = "example.com/workspace/buffers"  # the SDK adds the leading "_" on the wire
EXT_PROGRESS_NOTIFICATION = "example.com/progress"

# Used when the prompt carries no file:// resource link.
DEFAULT_FILE_NAME = "README.md"

log = logging.getLogger("example-agent")


@dataclass
class _Session:
    cwd: str
    turns: int = 0


def _text(text: str) -> TextContentBlock:
    # The literal discriminators (`type`, `session_update`) are required in 0.12.x and
    # defaulted in 1.0.0rc3; passing them keeps the example working on both.
    return TextContentBlock(type="text", text=text)


def _client_declares_buffers(capabilities: ClientCapabilities | None) -> bool:
    """True if the client advertised ``_meta["example.com/workspace"]["buffers"] == true``."""
    meta = capabilities.field_meta if capabilities is not None else None
    if not isinstance(meta, dict):  # 0.12.x turns a malformed `_meta` into None
        return False
    ext = meta.get(EXT_NAMESPACE)
    return isinstance(ext, dict) and ext.get("buffers") is True


def _file_from_prompt(prompt: list[Any], cwd: str) -> str:
    """The first file:// resource link in the prompt, else <cwd>/README.md (ACP paths are absolute)."""
    for block in prompt:
        if isinstance(block, ResourceContentBlock) and block.uri.startswith("file://"):
            return unquote(urlparse(block.uri).path)
    return str(Path(cwd, DEFAULT_FILE_NAME).resolve())


def _prompt_text(prompt: list[Any]) -> str:
    return " ".join(block.text for block in prompt if isinstance(block, TextContentBlock)).strip()


class ExampleAgent(Agent):
    """A scripted agent: no model, just a fixed sequence of ACP messages per turn."""

    _conn: Client

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._client_can_read = False
        self._client_has_buffers = False

    def on_connect(self, conn: Client) -> None:
        # The SDK hands us the connection to call the client back (session/update, fs, ...).
        self._conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,  # the SDK spreads the request's `_meta` keys in here
    ) -> InitializeResponse:
        # Remember what the client can do; we must not call methods it did not declare.
        fs = client_capabilities.fs if client_capabilities is not None else None
        self._client_can_read = bool(fs and fs.read_text_file)
        self._client_has_buffers = _client_declares_buffers(client_capabilities)
        log.info(
            "initialize from %s: fs.readTextFile=%s, %s buffers=%s",
            client_info.name if client_info else "<unknown client>",
            self._client_can_read,
            EXT_NAMESPACE,
            self._client_has_buffers,
        )
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=False,
                # Advertise our own extension: we emit `_example.com/progress` notifications.
                field_meta={EXT_NAMESPACE: {"progress": True}},
            ),
            agent_info=Implementation(name=AGENT_NAME, title="Example Agent", version=AGENT_VERSION),
        )

    async def new_session(self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any) -> NewSessionResponse:
        session_id = f"sess-{uuid.uuid4().hex[:12]}"
        self._sessions[session_id] = _Session(cwd=cwd)
        log.info("new session %s in %s", session_id, cwd)
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "reason": "unknown session"})
        session.turns += 1
        asked = _prompt_text(prompt) or "(no text)"
        path = _file_from_prompt(prompt, session.cwd)

        # 1. Stream the answer in several chunks, as a model would.
        for piece in (
            "Hello! ",
            f'You asked: "{asked.rstrip(".!?")}". ',
            "I'll search the workspace, ",
            "fetch the docs ",
            "and read your file.",
        ):
            await self._say(session_id, piece)

        # 2. Publish the plan. Each plan update replaces the whole plan on the client.
        await self._send(
            session_id,
            AgentPlanUpdate(
                session_update="plan",
                entries=[
                    PlanEntry(content="Search the workspace", priority="medium", status="in_progress"),
                    PlanEntry(content="Fetch the online docs", priority="low", status="pending"),
                    PlanEntry(content=f"Read {Path(path).name}", priority="high", status="pending"),
                ],
            ),
        )

        # 3. A tool call that succeeds, 4. one that fails.
        await self._run_tool(session_id, "tool-search", "Search the workspace for TODO", "search", ok=True)
        await self._run_tool(session_id, "tool-fetch", "Fetch https://docs.example.com", "fetch", ok=False)

        # 5. Ask before reading the file, then read it through the client (the client owns the files).
        lines = await self._read_with_permission(session_id, path)

        # 6. Only call the extension if the client declared it: an undeclared `_` request
        # would just come back as -32601 Method not found.
        buffers: list[Any] | None = None
        if self._client_has_buffers:
            try:
                result = await self._conn.ext_method(EXT_BUFFERS_METHOD, {"sessionId": session_id})
                buffers = result.get("buffers", []) if isinstance(result, dict) else []
            except RequestError as exc:
                log.warning("%s failed: %s", EXT_BUFFERS_METHOD, exc)

        # 7. A custom notification; clients that don't know it must ignore it.
        await self._conn.ext_notification(
            EXT_PROGRESS_NOTIFICATION, {"sessionId": session_id, "stage": "done", "turn": session.turns}
        )

        # 8. Close the answer and end the turn.
        read_part = f"{Path(path).name} has {lines} lines" if lines is not None else "I did not read the file"
        buffer_part = (
            f"{len(buffers)} open buffers" if buffers is not None else "no buffer info (extension not declared)"
        )
        await self._say(session_id, f" Done: {read_part}; {buffer_part}.")
        # Token usage as a model-backed agent would report it (scripted figures): traced as gen_ai.usage.*.
        usage = {"inputTokens": 1200, "outputTokens": 340, "totalTokens": 1540, "cachedReadTokens": 800}
        return PromptResponse.model_validate({"stopReason": "end_turn", "usage": usage})

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        # Nothing runs in the background, so there is nothing to stop.
        log.info("cancel for %s (ignored: turns are short)", session_id)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # We implement no client->agent extension requests: answer like an unknown method.
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        # Unknown extension notifications must be ignored, not fail.
        log.info("ignoring extension notification _%s", method)

    # -- helpers -------------------------------------------------------------------

    async def _send(self, session_id: str, update: Any) -> None:
        await self._conn.session_update(session_id=session_id, update=update)

    async def _say(self, session_id: str, text: str) -> None:
        await self._send(session_id, AgentMessageChunk(session_update="agent_message_chunk", content=_text(text)))

    async def _run_tool(self, session_id: str, tool_call_id: str, title: str, kind: Any, *, ok: bool) -> None:
        await self._send(
            session_id,
            ToolCallStart(
                session_update="tool_call", tool_call_id=tool_call_id, title=title, kind=kind, status="pending"
            ),
        )
        await self._start_tool(session_id, tool_call_id)
        await asyncio.sleep(0.01)  # "work"
        await self._finish_tool(session_id, tool_call_id, ok=ok, text="3 matches" if ok else "network unreachable")

    async def _read_with_permission(self, session_id: str, path: str) -> int | None:
        """Ask for permission, then read `path` via fs/read_text_file. Returns its line count, or None."""
        tool_call_id = "tool-read"
        await self._send(
            session_id,
            ToolCallStart(
                session_update="tool_call",
                tool_call_id=tool_call_id,
                title=f"Read {path}",
                kind="read",
                status="pending",
                locations=[ToolCallLocation(path=path)],
            ),
        )
        response = await self._conn.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(tool_call_id=tool_call_id, title=f"Read {path}", kind="read", status="pending"),
            options=[
                PermissionOption(option_id="allow", name="Allow once", kind="allow_once"),
                PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
            ],
        )
        # "cancelled" (DeniedOutcome) or any option other than "allow" means no.
        allowed = isinstance(response.outcome, AllowedOutcome) and response.outcome.option_id == "allow"
        if not allowed:
            await self._finish_tool(session_id, tool_call_id, ok=False, text="permission rejected")
            return None
        if not self._client_can_read:
            await self._finish_tool(session_id, tool_call_id, ok=False, text="client cannot read files")
            return None

        await self._start_tool(session_id, tool_call_id)
        try:
            content = (await self._conn.read_text_file(session_id=session_id, path=path)).content
        except RequestError as exc:
            await self._finish_tool(session_id, tool_call_id, ok=False, text=f"read failed: {exc}")
            return None
        lines = len(content.splitlines())
        await self._finish_tool(session_id, tool_call_id, ok=True, text=f"{lines} lines")
        return lines

    async def _start_tool(self, session_id: str, tool_call_id: str) -> None:
        await self._send(
            session_id,
            ToolCallProgress(session_update="tool_call_update", tool_call_id=tool_call_id, status="in_progress"),
        )

    async def _finish_tool(self, session_id: str, tool_call_id: str, *, ok: bool, text: str) -> None:
        await self._send(
            session_id,
            ToolCallProgress(
                session_update="tool_call_update",
                tool_call_id=tool_call_id,
                status="completed" if ok else "failed",
                content=[ContentToolCallContent(type="content", content=_text(text))],
            ),
        )


async def main() -> None:
    # stderr only: stdout is the JSON-RPC channel to the client.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="[agent] %(levelname)s %(message)s")
    await run_agent(ExampleAgent())


if __name__ == "__main__":
    asyncio.run(main())
