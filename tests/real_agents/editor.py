"""The editor stand-in: an ACP SDK client that drives one prompt turn of a real agent process.

It answers every permission with the first "allow" option, serves ``fs/*`` from the disk and ``terminal/*``
by running the command, and records every byte it sends and receives. The agent runs directly or behind
``acp-otel proxy``; either way a tap (``tap.py``) sits right in front of the agent and records the agent's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TAP = [sys.executable, str(HERE / "tap.py")]
PROXY = [sys.executable, "-m", "acp_otel.cli", "proxy"]


def _get(obj: Any, *names: str) -> Any:
    for name in names:
        if isinstance(obj, dict):
            if name in obj:
                return obj[name]
        elif hasattr(obj, name):
            return getattr(obj, name)
    return None


class Editor:
    """The client side of the connection (keyword arguments only: the SDK's positional order changed)."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.permissions: list[Any] = []
        self.calls: list[str] = []  # client methods the agent called, in order
        self._terminals: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    async def request_permission(self, options: Any, session_id: str, tool_call: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("session/request_permission")
        self.permissions.append(tool_call)
        allow = [o for o in options if str(_get(o, "kind")).startswith("allow")] or list(options)
        return {"outcome": {"outcome": "selected", "optionId": _get(allow[0], "option_id", "optionId")}}

    async def read_text_file(self, path: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("fs/read_text_file")
        return {"content": Path(path).read_text()}

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("fs/write_text_file")
        Path(path).write_text(content)
        return {}

    async def create_terminal(self, command: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("terminal/create")
        args = kwargs.get("args") or []
        cwd = kwargs.get("cwd")
        if args:
            proc = await asyncio.create_subprocess_exec(
                command, *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
        else:
            proc = await asyncio.create_subprocess_shell(
                command, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
        terminal_id = f"term-{next(self._ids)}"
        self._terminals[terminal_id] = {"proc": proc, "output": asyncio.ensure_future(proc.communicate())}
        return {"terminalId": terminal_id}

    async def _finish(self, terminal_id: str) -> tuple[str, int]:
        term = self._terminals[terminal_id]
        out, _ = await term["output"]
        return out.decode("utf-8", "replace"), int(term["proc"].returncode)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("terminal/output")
        output, code = await self._finish(terminal_id)
        return {"output": output, "truncated": False, "exitStatus": {"exitCode": code}}

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("terminal/wait_for_exit")
        _, code = await self._finish(terminal_id)
        return {"exitCode": code}

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("terminal/release")
        self._terminals.pop(terminal_id, None)
        return {}

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("terminal/kill")
        with contextlib.suppress(ProcessLookupError):
            self._terminals[terminal_id]["proc"].kill()
        return {}

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        from acp.exceptions import RequestError

        self.calls.append(method)
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.calls.append(method)


@dataclass
class Run:
    """What one editor session saw: the turn's result and updates, the bytes on each side, the shutdown."""

    editor: Editor
    init: Any = None
    session_id: str = ""
    result: Any = None  # the last turn's PromptResponse
    results: list[Any] = field(default_factory=list)  # every turn's, in order
    turn_updates: list[int] = field(default_factory=list)  # len(editor.updates) when each turn ended
    editor_sent: bytes = b""
    editor_received: bytes = b""
    agent_received: bytes = b""  # what the agent read (tap): the proxy's output when proxied
    agent_sent: bytes = b""
    shutdown_seconds: float = 0.0  # from closing the agent's stdin to the process's exit
    returncode: int | None = None
    stderr: str = ""
    # initialize_seconds: from the spawn to the initialize answer; turn_seconds: each prompt's round trip; signalled.
    extra: dict[str, Any] = field(default_factory=dict)

    def texts(self) -> str:
        """The agent's streamed message text."""
        parts = []
        for u in self.editor.updates:
            if _get(u, "session_update", "sessionUpdate") == "agent_message_chunk":
                parts.append(str(_get(_get(u, "content"), "text") or ""))
        return "".join(parts)

    def tool_call_ids(self) -> list[str]:
        """The distinct tool call ids the agent announced (tool_call updates or permissions), in order."""
        ids: list[str] = []
        for u in self.editor.updates:
            if _get(u, "session_update", "sessionUpdate") in ("tool_call", "tool_call_update"):
                tid = _get(u, "tool_call_id", "toolCallId")
                if tid not in ids:
                    ids.append(tid)
        for p in self.editor.permissions:
            tid = _get(p, "tool_call_id", "toolCallId")
            if tid not in ids:
                ids.append(tid)
        return ids


def lines(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\n") if line.strip()]


def messages(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(data)]


async def run_turn(
    agent: list[str],
    env: dict[str, str],
    cwd: Path,
    prompt_text: str | list[str],
    *,
    proxy_args: list[str] | None = None,
    before_prompt: Callable[[], None] | None = None,
    after_turn: Callable[[], None] | None = None,
    timeout: float = 180.0,
    grace: float = 10.0,
    tap: bool = True,
) -> Run:
    """One editor session: initialize, session/new, a prompt per text in ``prompt_text`` (``before_prompt`` is
    called before each, ``after_turn`` after each answer); then close the agent's stdin and time its exit. The
    agent runs in a process group of its own, which is killed after the exit is timed (an agent's leftovers
    would outlive the test).

    ``proxy_args`` None runs the agent directly (still behind the tap); a list runs ``acp-otel proxy ARGS -- ...``.
    ``tap`` False starts the agent itself, without the tap (no bytes recorded on its side): the proxy then sees
    the agent's own command line (as it names the agent's profile from it).
    """
    from acp import ClientSideConnection

    editor = Editor()
    run = Run(editor)
    with tempfile.TemporaryDirectory() as logs, tempfile.TemporaryFile() as stderr:
        tapped = [*TAP, f"{logs}/agent", "--", *agent] if tap else list(agent)
        command = tapped if proxy_args is None else [*PROXY, *proxy_args, "--", *tapped]
        spawned = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=str(cwd),
            limit=2**24,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        sent: list[bytes] = []
        received: list[bytes] = []
        write = proc.stdin.write

        def recording_write(data: bytes) -> None:
            sent.append(bytes(data))
            write(data)

        proc.stdin.write = recording_write  # type: ignore[method-assign]
        reader = asyncio.StreamReader(limit=2**24)
        stdout = proc.stdout

        async def pump() -> None:
            while chunk := await stdout.read(1 << 16):
                received.append(chunk)
                reader.feed_data(chunk)
            reader.feed_eof()

        pumping = asyncio.ensure_future(pump())
        conn = ClientSideConnection(lambda _agent: editor, proc.stdin, reader)
        try:
            run.init = await asyncio.wait_for(
                conn.initialize(
                    protocol_version=1,
                    client_capabilities={
                        "fs": {"readTextFile": True, "writeTextFile": True},
                        "terminal": True,
                    },
                    client_info={"name": "real-agents-editor", "version": "1.0"},
                ),
                timeout,
            )
            run.extra["initialize_seconds"] = time.monotonic() - spawned
            # Sent without the SDK's response model: the session's SDK is kimi-cli's pin (0.8.0), whose schema
            # lacks config option types newer agents send in this response (Cline's "boolean"); only the id is used.
            session = await asyncio.wait_for(
                conn._conn.send_request("session/new", {"cwd": str(cwd), "mcpServers": []}), timeout
            )
            run.session_id = session["sessionId"]
            for text in [prompt_text] if isinstance(prompt_text, str) else prompt_text:
                if before_prompt is not None:
                    before_prompt()
                prompted = time.monotonic()
                run.result = await asyncio.wait_for(
                    conn.prompt(session_id=run.session_id, prompt=[{"type": "text", "text": text}]), timeout
                )
                run.extra.setdefault("turn_seconds", []).append(time.monotonic() - prompted)
                run.results.append(run.result)
                await asyncio.sleep(0.3)  # trailing notifications of the turn
                if after_turn is not None:  # blocking (the model server going idle, say): the editor still serves
                    await asyncio.to_thread(after_turn)
                run.turn_updates.append(len(editor.updates))
        finally:
            # As editors do: close the agent's stdin; if it is still running after a grace period, SIGTERM;
            # then SIGKILL.
            started = time.monotonic()
            proc.stdin.close()
            for ending, wait in ((None, grace), (proc.terminate, 20.0), (proc.kill, 20.0)):
                if ending is not None:
                    with contextlib.suppress(ProcessLookupError):
                        ending()
                    run.extra.setdefault("signalled", []).append(ending.__name__)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), wait)
                    break
            run.shutdown_seconds = time.monotonic() - started
            run.returncode = proc.returncode
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the agent left in its group
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pumping, 5)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)
            stderr.seek(0)
            run.stderr = stderr.read().decode("utf-8", "replace")
            run.editor_sent, run.editor_received = b"".join(sent), b"".join(received)
            for name, attr in (("agent.in", "agent_received"), ("agent.out", "agent_sent")):
                path = Path(logs) / name
                setattr(run, attr, path.read_bytes() if path.exists() else b"")
    return run
