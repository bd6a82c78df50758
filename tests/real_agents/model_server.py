"""A scripted model on loopback for real agents: Anthropic Messages, OpenAI Responses, chat completions and Gemini.

Every API streams (SSE) the same scripted turn: the model asks to read a file, then to write one, then to
run a shell command, then answers with text, reporting token usage each time. The token counts differ per
call (``usage_of``), so a turn's total, its last call and a session's running total are different numbers;
the server records what it served per turn (``begin_turn``, ``served``), which the tests compare with what
the agents report. The step is the number of
tool results already in the request, so each agent's own loop drives it. Requests that offer no tools
(titles, summaries, warm-ups) get a short text answer. The tool names and argument shapes are the agent's
own: the first name the request offers from each step's candidates is used.
"""

from __future__ import annotations

import http.server
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Per step, candidate tools: (tool name, arguments builder). The first offered by the request wins.
Args = Callable[["Script"], dict[str, Any]]


@dataclass
class Script:
    """The scripted turn's files, command and canaries (strings that must never reach telemetry)."""

    workspace: Path
    canary: str

    @property
    def read_path(self) -> Path:
        return self.workspace / f"{self.canary}-read.txt"

    @property
    def write_path(self) -> Path:
        return self.workspace / f"{self.canary}-written.txt"

    @property
    def file_body(self) -> str:
        return f"file body {self.canary}-FILE\n"

    @property
    def write_body(self) -> str:
        return f"written {self.canary}-WRITE\n"

    @property
    def command(self) -> str:
        return f"echo {self.canary}-SHELL"

    @property
    def answer(self) -> str:
        return f"Done: {self.canary}-ANSWER"

    def canaries(self) -> list[str]:
        """Every secret string of the turn (file paths contain the canary too)."""
        return [self.canary]

    def prepare(self) -> None:
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.read_path.write_text(self.file_body)


STEPS: list[list[tuple[str, Args]]] = [
    [  # read
        ("Read", lambda s: {"file_path": str(s.read_path)}),
        ("ReadFile", lambda s: {"path": str(s.read_path)}),
        ("read_file", lambda s: {"file_path": str(s.read_path)}),
        ("shell", lambda s: {"command": ["cat", str(s.read_path)], "workdir": str(s.workspace)}),
        ("exec_command", lambda s: {"cmd": f"cat {s.read_path}", "workdir": str(s.workspace)}),
    ],
    [  # write
        ("Write", lambda s: {"file_path": str(s.write_path), "content": s.write_body}),
        ("WriteFile", lambda s: {"path": str(s.write_path), "content": s.write_body}),
        ("write_file", lambda s: {"file_path": str(s.write_path), "content": s.write_body}),
        (
            "shell",
            lambda s: {
                "command": ["bash", "-lc", f"printf '%s' '{s.write_body}' > {s.write_path}"],
                "workdir": str(s.workspace),
            },
        ),
        (
            "exec_command",
            lambda s: {"cmd": f"printf '%s' '{s.write_body}' > {s.write_path}", "workdir": str(s.workspace)},
        ),
    ],
    [  # shell
        ("Bash", lambda s: {"command": s.command, "description": "Print a word"}),
        ("Shell", lambda s: {"command": s.command}),
        ("run_shell_command", lambda s: {"command": s.command, "description": "Print a word"}),
        ("shell", lambda s: {"command": ["bash", "-lc", s.command], "workdir": str(s.workspace)}),
        ("exec_command", lambda s: {"cmd": s.command, "workdir": str(s.workspace)}),
    ],
]

# Agents whose tools the list above does not name: per step, tool names to look for, and the arguments built
# from the offered tool's own parameter names (a path, a body, a command).
FALLBACK_NAMES = [
    ("read", "view", "read_text_file", "read_files", "readFile"),
    ("write", "create", "write_text_file", "write_to_file", "writeFile", "apply_patch"),
    ("bash", "execute", "run_command", "execute_command", "run_commands", "exec"),
]
_PATH_KEYS = ("file_path", "filePath", "path", "absolute_path", "absolutePath", "filename")
_BODY_KEYS = ("content", "file_text", "text", "contents")
_COMMAND_KEYS = ("command", "cmd")


def fallback_arguments(step: int, properties: list[str], script: Script) -> dict[str, Any]:
    """Arguments for the step's tool from the names of its parameters."""
    args: dict[str, Any] = {}
    path = script.read_path if step == 0 else script.write_path
    for key in properties:
        if key in _PATH_KEYS and step < 2:
            args[key] = str(path)
        elif key in _BODY_KEYS and step == 1:
            args[key] = script.write_body
        elif key in _COMMAND_KEYS and step == 2:
            args[key] = script.command
        elif key == "description" and step == 2:
            args[key] = "Print a word"
        elif key == "files" and step == 0:  # Cline's read_files
            args[key] = [{"path": str(path)}]
        elif key == "commands" and step == 2:  # Cline's run_commands
            args[key] = [script.command]
        elif key == "input" and step == 1:  # Cline's apply_patch
            body = "".join(f"+{line}\n" for line in script.write_body.splitlines())
            args[key] = f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch"
    return args


USAGE = (1200, 40)  # input, output tokens of a model's first call; later calls add USAGE_STEP per call
USAGE_STEP = (100, 3)


def usage_of(call: int) -> tuple[int, int]:
    """Input and output tokens reported for the server's ``call``-th answer (from 0): all different."""
    return USAGE[0] + USAGE_STEP[0] * call, USAGE[1] + USAGE_STEP[1] * call


def _props(schema: Any) -> list[str]:
    """The property names of a tool's JSON schema."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return list(properties) if isinstance(properties, dict) else []


@dataclass
class Call:
    """One scripted model answer: a tool call, or text."""

    tool: str | None
    arguments: dict[str, Any]
    text: str
    call_id: str


@dataclass
class ModelServer:
    """``with ModelServer(script) as model: model.url ...``; ``model.log`` holds (path, request body) pairs."""

    script: Script
    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # Per turn (begin_turn), the (input, output) tokens of each answer served: what the agent used.
    turns: list[list[tuple[int, int]]] = field(default_factory=lambda: [[]])
    unknown_tools: list[list[str]] = field(default_factory=list)  # offered tool lists no step could use
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _calls: Iterator[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: int = 0  # requests being answered
    _last_activity: float = field(default_factory=time.monotonic)  # a request's start or end

    def begin_turn(self) -> None:
        """Count the answers served from now on as the next turn's (the first turn needs no call)."""
        with self._lock:
            if self.turns[-1]:
                self.turns.append([])

    def usage(self) -> tuple[int, int]:
        """The token counts for the next answer, recorded as served in the current turn."""
        with self._lock:
            used = usage_of(next(self._calls))
            self.turns[-1].append(used)
            return used

    def wait_idle(self, quiet: float = 0.5, timeout: float = 15.0) -> None:
        """Return once no request is being answered and none started or ended for ``quiet`` seconds (at most
        ``timeout``): some agents make model calls of their own as a turn answers (Qwen Code makes two), and an
        editor that stays open lets them finish, as a user's does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                idle = self._in_flight == 0 and time.monotonic() - self._last_activity >= quiet
            if idle:
                return
            time.sleep(0.05)

    def _activity(self, change: int) -> None:
        with self._lock:
            self._in_flight += change
            self._last_activity = time.monotonic()

    def served(self, turn: int) -> tuple[int, int]:
        """Input and output tokens served in ``turn`` (from 0), summed over its answers."""
        calls = self.turns[turn] if turn < len(self.turns) else []
        return sum(c[0] for c in calls), sum(c[1] for c in calls)

    def __post_init__(self) -> None:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.log.append((self.path, {}))
                self._json({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                server._activity(1)
                try:
                    self._post()
                finally:
                    server._activity(-1)

            def _post(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                server.log.append((self.path, body))
                path = self.path.split("?")[0]
                if path.endswith("/messages/count_tokens"):
                    self._json({"input_tokens": USAGE[0]})
                elif path.endswith(":countTokens"):
                    self._json({"totalTokens": USAGE[0]})
                elif path.endswith(":streamGenerateContent") or path.endswith(":generateContent"):
                    self._gemini(body, path.endswith(":streamGenerateContent"))
                elif path.endswith("/messages"):
                    self._anthropic(body)
                elif path.endswith("/responses"):
                    self._responses(body)
                elif path.endswith("/chat/completions"):
                    self._chat(body)
                else:
                    self._json({})

            def _json(self, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: list[tuple[str | None, Any]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for name, data in events:
                    text = data if isinstance(data, str) else json.dumps(data)
                    chunk = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
                    self.wfile.write(chunk.encode())
                self.wfile.flush()
                self.close_connection = True

            # Anthropic Messages -------------------------------------------------------------------
            def _anthropic(self, body: dict[str, Any]) -> None:
                tools = [t.get("name") for t in body.get("tools") or []]
                schemas = {t.get("name"): _props(t.get("input_schema")) for t in body.get("tools") or []}
                done = sum(
                    1
                    for m in body.get("messages") or []
                    if isinstance(m.get("content"), list)
                    for b in m["content"]
                    if isinstance(b, dict) and b.get("type") == "tool_result"
                )
                call = server.next_call(tools, done, "toolu_", schemas)
                message_id = f"msg_{next(server._ids)}"
                used = server.usage()
                usage = {"input_tokens": used[0], "output_tokens": 1, "cache_read_input_tokens": 0}
                message = {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "fake-model"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": usage,
                }
                if call.tool is not None:
                    block: dict[str, Any] = {"type": "tool_use", "id": call.call_id, "name": call.tool, "input": {}}
                    delta = {"type": "input_json_delta", "partial_json": json.dumps(call.arguments)}
                    stop = "tool_use"
                else:
                    block = {"type": "text", "text": ""}
                    delta = {"type": "text_delta", "text": call.text}
                    stop = "end_turn"
                if not body.get("stream"):
                    final = dict(block)
                    if call.tool is not None:
                        final["input"] = call.arguments
                    else:
                        final["text"] = call.text
                    message.update(
                        content=[final], stop_reason=stop, usage={"input_tokens": used[0], "output_tokens": used[1]}
                    )
                    self._json(message)
                    return
                self._sse(
                    [
                        ("message_start", {"type": "message_start", "message": message}),
                        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
                        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                        (
                            "message_delta",
                            {
                                "type": "message_delta",
                                "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": used[1]},
                            },
                        ),
                        ("message_stop", {"type": "message_stop"}),
                    ]
                )

            # OpenAI Responses ---------------------------------------------------------------------
            def _responses(self, body: dict[str, Any]) -> None:
                tools = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
                schemas = {t.get("name"): _props(t.get("parameters")) for t in body.get("tools") or []}
                items = body.get("input") if isinstance(body.get("input"), list) else []
                done = sum(
                    1
                    for item in items
                    if isinstance(item, dict)
                    and item.get("type")
                    in ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
                )
                call = server.next_call(tools, done, "call_", schemas)
                response_id = f"resp_{next(server._ids)}"
                used = server.usage()
                usage = {
                    "input_tokens": used[0],
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": used[1],
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": sum(used),
                }
                base = {"id": response_id, "object": "response", "model": body.get("model", "fake-model")}
                if call.tool is not None:
                    item: dict[str, Any] = {
                        "type": "function_call",
                        "id": f"fc_{call.call_id}",
                        "call_id": call.call_id,
                        "name": call.tool,
                        "arguments": json.dumps(call.arguments),
                        "status": "completed",
                    }
                    events: list[tuple[str | None, Any]] = []
                else:
                    item = {
                        "type": "message",
                        "id": f"msg_{response_id}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": call.text, "annotations": []}],
                    }
                    events = [
                        (
                            "response.output_item.added",
                            {
                                "type": "response.output_item.added",
                                "output_index": 0,
                                "item": {**item, "content": [], "status": "in_progress"},
                            },
                        ),
                        (
                            "response.output_text.delta",
                            {
                                "type": "response.output_text.delta",
                                "item_id": item["id"],
                                "output_index": 0,
                                "content_index": 0,
                                "delta": call.text,
                            },
                        ),
                    ]
                self._sse(
                    [
                        (
                            "response.created",
                            {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
                        ),
                        *events,
                        (
                            "response.output_item.done",
                            {"type": "response.output_item.done", "output_index": 0, "item": item},
                        ),
                        (
                            "response.completed",
                            {
                                "type": "response.completed",
                                "response": {**base, "status": "completed", "output": [item], "usage": usage},
                            },
                        ),
                    ]
                )

            # OpenAI chat completions --------------------------------------------------------------
            def _chat(self, body: dict[str, Any]) -> None:
                functions = [t.get("function") or {} for t in body.get("tools") or [] if isinstance(t, dict)]
                tools = [f.get("name") for f in functions]
                schemas = {f.get("name"): _props(f.get("parameters")) for f in functions}
                turn = server.this_turn(body.get("messages"))
                done = sum(1 for m in turn if isinstance(m, dict) and m.get("role") == "tool")
                call = server.next_call(tools, done, "call_", schemas)
                chunk_id = f"chatcmpl-{next(server._ids)}"
                used = server.usage()
                usage = {"prompt_tokens": used[0], "completion_tokens": used[1], "total_tokens": sum(used)}
                model = body.get("model", "fake-model")
                if call.tool is not None:
                    delta: dict[str, Any] = {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": call.call_id,
                                "type": "function",
                                "function": {"name": call.tool, "arguments": json.dumps(call.arguments)},
                            }
                        ],
                    }
                    finish = "tool_calls"
                else:
                    delta = {"role": "assistant", "content": call.text}
                    finish = "stop"
                if not body.get("stream"):
                    message = {k: v for k, v in delta.items() if k != "tool_calls"}
                    if call.tool is not None:
                        message["tool_calls"] = [
                            {k: v for k, v in tc.items() if k != "index"} for tc in delta["tool_calls"]
                        ]
                    self._json(
                        {
                            "id": chunk_id,
                            "object": "chat.completion",
                            "created": 0,
                            "model": model,
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                            "usage": usage,
                        }
                    )
                    return

                def chunk(choice_delta: dict[str, Any], reason: str | None, **extra: Any) -> dict[str, Any]:
                    return {
                        "id": chunk_id,
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": model,
                        "choices": [{"index": 0, "delta": choice_delta, "finish_reason": reason}],
                        **extra,
                    }

                self._sse([(None, chunk(delta, None)), (None, chunk({}, finish, usage=usage)), (None, "[DONE]")])

            # Gemini generateContent (SSE with ?alt=sse) ------------------------------------------
            def _gemini(self, body: dict[str, Any], stream: bool) -> None:
                declarations = [
                    d
                    for t in body.get("tools") or []
                    if isinstance(t, dict)
                    for d in t.get("functionDeclarations") or t.get("function_declarations") or []
                    if isinstance(d, dict)
                ]
                tools = [d.get("name") for d in declarations]
                schemas = {
                    d.get("name"): _props(d.get("parametersJsonSchema") or d.get("parameters")) for d in declarations
                }
                done = sum(
                    1
                    for c in server.this_turn(body.get("contents"))
                    if isinstance(c, dict)
                    for part in c.get("parts") or []
                    if isinstance(part, dict) and "functionResponse" in part
                )
                call = server.next_call(tools, done, "gem_", schemas)
                used = server.usage()
                part = (
                    {"functionCall": {"name": call.tool, "args": call.arguments}}
                    if call.tool is not None
                    else {"text": call.text}
                )
                answer = {
                    "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                    "usageMetadata": {
                        "promptTokenCount": used[0],
                        "candidatesTokenCount": used[1],
                        "totalTokenCount": sum(used),
                    },
                    "modelVersion": "scripted-model",
                    "responseId": call.call_id,
                }
                if stream:
                    self._sse([(None, answer)])
                else:
                    self._json(answer)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def next_call(self, tools: list[Any], done: int, prefix: str, schemas: dict[str, list[str]] | None = None) -> Call:
        """The scripted answer for a request offering ``tools`` (their parameter names in ``schemas``) after
        ``done`` tool results."""
        call_id = f"{prefix}{next(self._ids)}"
        tools = [t for t in tools if t]
        if tools and done < len(STEPS):
            for name, build in STEPS[done]:
                if name in tools:
                    return Call(name, build(self.script), "", call_id)
            for name in FALLBACK_NAMES[done]:
                if name in tools:
                    properties = (schemas or {}).get(name, [])
                    return Call(name, fallback_arguments(done, properties, self.script), "", call_id)
            self.unknown_tools.append([f"{t}({','.join((schemas or {}).get(t, []))})" for t in tools])
            return Call(None, {}, self.script.answer, call_id)  # no tool for the step: the turn ends
        if tools and done >= len(STEPS):
            return Call(None, {}, self.script.answer, call_id)
        return Call(None, {}, "Scripted", call_id)

    def this_turn(self, history: Any) -> list[Any]:
        """The messages of ``history`` from the last one carrying a prompt of the script on (a second turn
        sees the first turn's tool results before its prompt)."""
        items = history if isinstance(history, list) else []
        marker = f"{self.script.canary}-PROMPT"
        starts = [i for i, item in enumerate(items) if marker in json.dumps(item)]
        return items[starts[-1] :] if starts else items

    def tool_requests(self) -> list[tuple[str, dict[str, Any]]]:
        """The logged requests that offered tools (the turn's own model calls)."""
        return [(p, b) for p, b in self.log if b.get("tools")]

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
