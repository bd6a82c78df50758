"""Example ACP client (a stand-in for an editor): spawns the example agent and runs one turn.

    python examples/client.py                        # spawns `python examples/agent.py`
    python examples/client.py --prompt "hi" --file /etc/hostname
    python examples/client.py --no-extension         # don't declare the buffers extension
    python examples/client.py --reject               # answer the permission request with "reject"
    python examples/client.py -- node my-agent.js    # any other ACP agent command

Everything the agent does during the turn is printed to stdout, one line per event, each
line starting with a tag such as ``[chunk]``, ``[tool]`` or ``[stop]``. Diagnostics go
to stderr (the agent's stderr is passed through).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    Client,
    ReadTextFileResponse,
    RequestError,
    RequestPermissionResponse,
    WriteTextFileResponse,
    spawn_agent_process,
)
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    ContentToolCallContent,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    ResourceContentBlock,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

EXAMPLES_DIR = Path(__file__).resolve().parent
DEFAULT_AGENT = [sys.executable, str(EXAMPLES_DIR / "agent.py")]
DEFAULT_FILE = EXAMPLES_DIR / "README.md"
DEFAULT_PROMPT = "Summarise the attached file and tell me what I have open."

# The extension this client offers to agents (see examples/README.md):
#   clientCapabilities._meta = {"example.com/workspace": {"buffers": true}}
#   request  _example.com/workspace/buffers {sessionId} -> {"buffers": [{path, languageId, dirty}]}
EXT_NAMESPACE = "example.com/workspace"
EXT_BUFFERS_METHOD = "example.com/workspace/buffers"  # as the SDK hands it to ext_method (no "_")

log = logging.getLogger("example-client")


def emit(tag: str, text: str) -> None:
    # Flush each line: stdout is usually a pipe (tests, `| less`) and we interleave with stderr.
    print(f"[{tag}] {text}", flush=True)


def _tool_content_text(content: list[Any] | None) -> str:
    parts = [
        item.content.text
        for item in content or []
        if isinstance(item, ContentToolCallContent) and isinstance(item.content, TextContentBlock)
    ]
    return "; ".join(parts)


class ExampleClient(Client):
    """Answers the agent's requests the way an editor would, and renders the turn as text."""

    def __init__(self, *, allow: bool = True, offer_extension: bool = True) -> None:
        self.allow = allow
        self.offer_extension = offer_extension
        self.message: list[str] = []  # the agent's streamed answer, reassembled

    def on_connect(self, conn: Agent) -> None:
        # Not needed here: this client only answers; main() drives the connection.
        pass

    # -- agent -> client requests ---------------------------------------------------

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        # A real editor would show a dialog; we pick by option *kind*, since ids are the agent's choice.
        wanted = ("allow_once", "allow_always") if self.allow else ("reject_once", "reject_always")
        choice = next((option for option in options if option.kind in wanted), None)
        title = tool_call.title or tool_call.tool_call_id
        if choice is None:
            emit("permission", f"{title} -> cancelled (no matching option)")
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        emit("permission", f"{title} -> {choice.option_id} ({choice.kind})")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice.option_id))

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        # ACP paths are absolute; a real editor would also serve unsaved buffer contents.
        if not os.path.isabs(path):
            raise RequestError.invalid_params({"path": path, "reason": "path must be absolute"})
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            emit("fs", f"read_text_file {path} -> error {exc.strerror}")
            raise RequestError.resource_not_found(Path(path).as_uri()) from exc
        if line is not None or limit is not None:  # `line` is 1-based
            lines = text.splitlines(keepends=True)
            start = max((line or 1) - 1, 0)
            text = "".join(lines[start : start + limit if limit is not None else None])
        emit("fs", f"read_text_file {path} -> {len(text)} chars")
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse | None:
        # We declared fs.writeTextFile = false, so a well-behaved agent never gets here.
        raise RequestError.method_not_found("fs/write_text_file")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        # The SDK routes every `_`-prefixed request here, with the "_" stripped and the
        # params dict as sent (including any `_meta`).
        if method == EXT_BUFFERS_METHOD and self.offer_extension:
            buffers = [
                {"path": str(EXAMPLES_DIR / "agent.py"), "languageId": "python", "dirty": False},
                {"path": str(EXAMPLES_DIR / "client.py"), "languageId": "python", "dirty": True},
            ]
            emit("ext", f"_{method} -> {len(buffers)} buffers")
            return {"buffers": buffers}
        emit("ext", f"_{method} -> method not found")
        raise RequestError.method_not_found(f"_{method}")

    # -- agent -> client notifications ----------------------------------------------

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        # Unknown extension notifications must be ignored; we just show them.
        details = " ".join(f"{key}={value}" for key, value in params.items() if key not in ("sessionId", "_meta"))
        emit("notify", f"_{method} {details}".rstrip())

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AgentMessageChunk):
            text = update.content.text if isinstance(update.content, TextContentBlock) else f"<{update.content.type}>"
            self.message.append(text)
            emit("chunk", text)
        elif isinstance(update, AgentThoughtChunk):
            emit("thought", getattr(update.content, "text", "<non-text>"))
        elif isinstance(update, AgentPlanUpdate):
            for number, entry in enumerate(update.entries, 1):
                emit("plan", f"{number}. [{entry.status}] ({entry.priority}) {entry.content}")
        elif isinstance(update, ToolCallStart):
            emit("tool", f"{update.tool_call_id} {update.status or 'pending'}: {update.title} (kind={update.kind})")
        elif isinstance(update, ToolCallProgress):
            detail = _tool_content_text(update.content)
            emit("tool", f"{update.tool_call_id} {update.status}" + (f": {detail}" if detail else ""))
        else:
            # Open enum: newer agents may send kinds we don't know; show, don't fail.
            emit("update", str(getattr(update, "session_update", type(update).__name__)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run one ACP turn against an agent over stdio.")
    parser.add_argument("-p", "--prompt", default=DEFAULT_PROMPT, help="prompt text (default: %(default)r)")
    parser.add_argument(
        "-f",
        "--file",
        type=Path,
        default=DEFAULT_FILE,
        help="file attached to the prompt (default: examples/README.md)",
    )
    parser.add_argument(
        "--no-extension", action="store_true", help=f"don't declare the {EXT_NAMESPACE} extension in capabilities"
    )
    parser.add_argument("--reject", action="store_true", help="answer the permission request with 'reject'")
    parser.add_argument(
        "agent", nargs=argparse.REMAINDER, help="agent command after '--' (default: python examples/agent.py)"
    )
    args = parser.parse_args(argv)
    if args.agent and args.agent[0] == "--":
        args.agent = args.agent[1:]
    return args


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="[client] %(levelname)s %(message)s")

    command = args.agent or DEFAULT_AGENT
    client = ExampleClient(allow=not args.reject, offer_extension=not args.no_extension)
    capabilities = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=True, write_text_file=False),
        terminal=False,
        # Extensions are declared in the capability object's `_meta`, keyed by namespace.
        field_meta=None if args.no_extension else {EXT_NAMESPACE: {"buffers": True}},
    )
    attachment = args.file.resolve()

    try:
        # Leaving the context manager closes the agent's stdin, waits, then escalates to
        # terminate/kill: the same shutdown an editor does. stderr=None lets the agent's
        # logs through; the SDK's default (a pipe nobody reads) can block a chatty agent.
        async with spawn_agent_process(client, command[0], *command[1:], transport_kwargs={"stderr": None}) as (
            conn,
            _process,
        ):
            init = await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=capabilities,
                client_info=Implementation(name="example-client", title="Example Client", version="0.1.0"),
            )
            agent = init.agent_info
            emit(
                "init",
                f"agent={agent.name if agent else '?'} version={agent.version if agent else '?'} "
                f"protocol={init.protocol_version}",
            )

            session = await conn.new_session(cwd=os.getcwd(), mcp_servers=[])
            emit("session", session.session_id)

            emit("prompt", args.prompt)
            response = await conn.prompt(
                session_id=session.session_id,
                prompt=[
                    TextContentBlock(type="text", text=args.prompt),
                    # A resource link is baseline prompt content; the agent reads it via fs/read_text_file.
                    ResourceContentBlock(type="resource_link", uri=attachment.as_uri(), name=attachment.name),
                ],
            )
            emit("message", "".join(client.message))
            emit("stop", str(response.stop_reason))
    except (RequestError, ConnectionError, OSError) as exc:
        log.error("turn failed: %r", exc)  # a traceback adds nothing for a CLI user
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
