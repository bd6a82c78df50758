"""The Rust SDK (crate ``agent-client-protocol``, built from ``tests/rust_peers/``) on both sides of the proxy.

* The Python SDK's client, traced with acp-otel, -> ``acp-otel proxy`` -> the Rust agent: one trace per turn,
  the proxy's spans as for any untraced agent, every byte relayed unchanged but the trace keys, and the agent's
  calls back into the editor in the turn's trace.
* The Rust client -> ``acp-otel proxy`` -> the example agent traced by ``opentelemetry-instrument``: the agent's
  spans continue the proxy's trace.
* What the Rust SDK hands a handler of the ``_meta`` it received, and what it does with it (docs/agents.md).

Real processes; the proxy's and the Python agent's spans arrive over OTLP/HTTP at a loopback receiver, the
traced editor's at the in-memory exporter. The tap (``tests/real_agents/tap.py``) records the agent's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from acp_app import FILE_BODY, TraceClient, initialize
from harness import PROXY, REPO, base_env
from otlp_sink import OtlpSink, Span

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TAP = [sys.executable, str(REPO / "tests" / "real_agents" / "tap.py")]
TRACE_KEYS = ("traceparent", "tracestate", "baggage")
PROXY_SERVICE = "proxy"
AGENT_SERVICE = "python-agent"
# A _meta key nobody knows, nested and in a set order: the Rust agent must see it, and pass it on, as sent.
UNKNOWN_META = {"test.dev/unknown": {"z": [1, "two", None], "a": {"deep": True}}}


@pytest.fixture
def sink() -> Any:
    with OtlpSink() as s:
        yield s


def same(a: Any, b: Any) -> bool:
    """Equal JSON values with their objects' keys in the same order (``json`` keeps the order it read)."""
    return json.dumps(a) == json.dumps(b)


def lines(data: bytes) -> list[bytes]:
    return [line for line in data.split(b"\n") if line.strip()]


def without_trace_keys(message: dict[str, Any], keep_empty_meta: bool = True) -> dict[str, Any]:
    """``message`` less the trace keys in its ``params._meta`` (and less ``_meta`` itself when that leaves it empty
    and ``keep_empty_meta`` is false: the proxy added it)."""
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("_meta"), dict):
        return message
    meta = {k: v for k, v in params["_meta"].items() if k not in TRACE_KEYS}
    params = {k: (meta if k == "_meta" else v) for k, v in params.items() if k != "_meta" or meta or keep_empty_meta}
    return {**message, "params": params}


def assert_relayed(sent: bytes, relayed: bytes) -> int:
    """Each line of ``sent`` arrives in order, byte for byte, or differs only by the trace keys the proxy writes
    into ``params._meta`` (every other key kept, in order); the number of lines that differ."""
    before, after = lines(sent), lines(relayed)
    assert len(before) == len(after), (len(before), len(after))
    changed = 0
    for old, new in zip(before, after, strict=True):
        if old != new:
            changed += 1
            original, forwarded = json.loads(old), json.loads(new)
            assert "traceparent" in forwarded["params"]["_meta"], new[:400]
            had_meta = isinstance(original.get("params"), dict) and "_meta" in original["params"]
            stripped = without_trace_keys(forwarded, keep_empty_meta=had_meta)
            assert same(stripped, without_trace_keys(original)), (old, new)
    return changed


def seen_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def proxy_span(spans: list[Span], name: str, kind: str = "CLIENT") -> Span:
    found = [
        s
        for s in spans
        if s.service == PROXY_SERVICE and s.kind == kind and name in (s.name, s.attributes.get("acp.method.name"))
    ]
    assert len(found) == 1, (name, [(s.service, s.name, s.kind) for s in spans])
    return found[0]


@dataclass
class Turn:
    """One editor turn through the proxy to a tapped agent: what each side sent and received."""

    client: TraceClient
    result: Any = None
    session_id: str = ""
    editor_sent: bytes = b""
    editor_received: bytes = b""
    agent_received: bytes = b""
    agent_sent: bytes = b""
    returncode: int | None = None
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@contextlib.asynccontextmanager
async def python_editor(agent: list[str], env: dict[str, str], cwd: Path) -> AsyncIterator[tuple[Any, Turn]]:
    """The Python SDK's client (``TraceClient``) on ``acp-otel proxy -- tap -- agent``, recording its bytes."""
    from acp import ClientSideConnection

    turn = Turn(TraceClient())
    logs = cwd / "tap"
    proc = await asyncio.create_subprocess_exec(
        *PROXY,
        "--service-name",
        PROXY_SERVICE,
        "--flush-timeout",
        "10",
        "--",
        *TAP,
        str(logs),
        "--",
        *agent,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(cwd),
        limit=2**24,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
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
    errors = asyncio.ensure_future(proc.stderr.read())
    conn = ClientSideConnection(lambda _agent: turn.client, proc.stdin, reader)
    try:
        yield conn, turn
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        turn.returncode = proc.returncode
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pumping, 5)
        turn.stderr = (await asyncio.wait_for(errors, 5)).decode("utf-8", "replace")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.close(), 5)
        turn.editor_sent, turn.editor_received = b"".join(sent), b"".join(received)
        turn.agent_received = Path(f"{logs}.in").read_bytes()
        turn.agent_sent = Path(f"{logs}.out").read_bytes()


def by_method(data: bytes) -> dict[str, list[dict[str, Any]]]:
    """The messages of ``data`` by method; answers (and errors) under ``"result"``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for line in lines(data):
        message = json.loads(line)
        out.setdefault(message.get("method", "result"), []).append(message)
    return out


async def test_python_editor_through_the_proxy_to_the_rust_agent(
    rust_peers: Path, sink: OtlpSink, instrument: Any, exporter: Any, tmp_path: Path
) -> None:
    """Traced Python SDK client -> proxy -> Rust agent: one trace per turn, the proxy's turn, tool and permission
    spans, the agent's calls back into the editor in the turn's trace, every byte relayed but the trace keys; and
    the Rust SDK hands each handler the ``_meta`` it received, unknown keys and trace keys, in order."""
    seen = tmp_path / "seen.jsonl"
    env = base_env(**sink.env(), ACP_RUST_PEER_LOG=str(seen))
    async with python_editor([str(rust_peers / "agent")], env, tmp_path) as (conn, turn):
        init = await initialize(conn)
        session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        turn.session_id = session.session_id
        turn.result = await conn.prompt(
            session_id=session.session_id, prompt=[{"type": "text", "text": "read my notes"}], **UNKNOWN_META
        )
    assert init.agent_info is not None and init.agent_info.name == "rust-test-agent"
    assert turn.result.stop_reason == "end_turn", turn.stderr
    kinds = [getattr(u, "session_update", None) for u in turn.client.updates]
    assert kinds == [
        "agent_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "agent_message_chunk",
    ]
    assert [p["value"] for p in turn.client.ext_params] == [42]  # the extension request reached the editor
    assert f"{len(FILE_BODY)} bytes read, echo 42" in repr(turn.client.updates[3])
    assert turn.returncode == 0 and turn.stderr == "", turn.stderr

    # Every byte through, but the trace keys the proxy adds to requests and notifications; and it did add some.
    assert assert_relayed(turn.editor_sent, turn.agent_received) == 3  # initialize, session/new, session/prompt
    assert assert_relayed(turn.agent_sent, turn.editor_received) >= 3  # permission, fs, the extension request

    # The editor's turn, the proxy's turn and its children: one trace.
    spans = sink.wait_for(
        lambda s: (
            any(x.name.startswith("execute_tool") for x in s)
            and any(x.attributes.get("acp.method.name") == "session/prompt" for x in s)
        ),
        timeout=30,
    )
    editor_spans = exporter.get_finished_spans()
    editor_turn = next(s for s in editor_spans if s.attributes.get("acp.method.name") == "session/prompt")
    trace_id = format(editor_turn.context.trace_id, "032x")
    proxy_turn = proxy_span(spans, "session/prompt")
    assert proxy_turn.trace_id == trace_id and proxy_turn.parent_id == format(editor_turn.context.span_id, "016x")
    assert proxy_turn.attributes["gen_ai.agent.name"] == "rust-test-agent"
    assert proxy_turn.attributes["gen_ai.conversation.id"] == session.session_id
    assert proxy_turn.attributes["acp.stop_reason"] == "end_turn"
    (tool,) = [s for s in spans if s.name.startswith("execute_tool")]
    assert tool.name == "execute_tool read_file" and tool.attributes["gen_ai.tool.call.id"] == "rust-call-1"
    assert tool.trace_id == trace_id and tool.parent_id == proxy_turn.span_id
    # The agent's calls back into the editor: the proxy's span under the tool call (permission, file) or the turn,
    # and the editor's SERVER span under the proxy's.
    for method, parent in (
        ("session/request_permission", tool.span_id),
        ("fs/read_text_file", tool.span_id),
        ("_test.dev/echo", None),
    ):
        span = proxy_span(spans, method)
        assert span.trace_id == trace_id, method
        if parent is not None:
            assert span.parent_id == parent, method
        editor_side = [
            s for s in editor_spans if s.kind.name == "SERVER" and s.attributes.get("acp.method.name") == method
        ]
        assert len(editor_side) == 1, method
        assert format(editor_side[0].parent.span_id, "016x") == span.span_id, method
    of_turn = [s for s in spans if s.service == PROXY_SERVICE and s.name not in ("initialize", "session/new")]
    assert {s.trace_id for s in of_turn} == {trace_id}, [(s.name, s.trace_id) for s in of_turn]

    # What the Rust SDK handed the handlers: each request's _meta as the agent received it (trace keys included),
    # unknown keys kept in order.
    received = by_method(turn.agent_received)
    handed = {entry["method"]: entry for entry in seen_log(seen)}
    assert set(handed) == {"initialize", "session/new", "session/prompt"}
    for method in handed:
        (message,) = received[method]
        assert "traceparent" in message["params"]["_meta"]
        assert same(handed[method]["meta"], message["params"]["_meta"]), method
    prompt_meta = received["session/prompt"][0]["params"]["_meta"]
    assert prompt_meta["test.dev/unknown"] == UNKNOWN_META["test.dev/unknown"]
    # Passed on by the agent as it was handed (the answer's _meta["test.dev/seen"]): every key, in order.
    answers = [json.loads(line) for line in lines(turn.agent_sent) if b'"test.dev/seen"' in line]
    assert len(answers) == 1
    assert same(answers[0]["result"]["_meta"]["test.dev/seen"], prompt_meta)
    # The SDK adds no _meta of its own: no trace context on the agent's requests, none copied into its answers.
    sent = by_method(turn.agent_sent)
    for method in ("session/request_permission", "fs/read_text_file", "_test.dev/echo"):
        (request,) = sent[method]
        assert "_meta" not in request["params"], request
    assert [a for a in sent["result"] if "_meta" in a["result"]] == answers


def test_rust_client_through_the_proxy_to_a_traced_python_agent(
    rust_peers: Path, sink: OtlpSink, tmp_path: Path
) -> None:
    """Rust client -> proxy -> the example agent under ``opentelemetry-instrument``: the agent's spans continue the
    proxy's trace, every byte is relayed but the trace keys, and the Rust client's handlers are handed the trace
    keys the proxy writes into the agent's calls."""
    launcher = shutil.which("opentelemetry-instrument", path=str(Path(sys.executable).parent))
    if launcher is None:
        pytest.skip("opentelemetry-instrument is not installed beside this Python")
    (tmp_path / "README.md").write_text("one\ntwo\nthree\n")  # what the example agent reads through the client
    seen = tmp_path / "seen.jsonl"
    # The proxy keeps its exporter settings to itself: the agent's own are given in its command.
    agent_env = {**sink.env(), "OTEL_SERVICE_NAME": AGENT_SERVICE}
    agent = [
        "env",
        *(f"{k}={v}" for k, v in agent_env.items()),
        launcher,
        sys.executable,
        str(REPO / "examples" / "agent.py"),
    ]
    proxy = [*PROXY, "--service-name", PROXY_SERVICE, "--flush-timeout", "10", "--"]
    editor_tap, agent_tap = [*TAP, str(tmp_path / "editor"), "--"], [*TAP, str(tmp_path / "agent"), "--"]
    done = subprocess.run(
        [str(rust_peers / "client"), *editor_tap, *proxy, *agent_tap, *agent],
        env=base_env(**sink.env(), ACP_RUST_PEER_LOG=str(seen)),
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["agent"] == "example-agent" and summary["stopReason"] == "end_turn", summary
    assert summary["agentExit"] == 0, done.stderr[-3000:]  # the proxy, at the end of its input
    # Every byte of the Rust client's messages and of the agent's through, but the trace keys the proxy writes.
    tapped = {name: (tmp_path / name).read_bytes() for name in ("editor.in", "editor.out", "agent.in", "agent.out")}
    assert assert_relayed(tapped["editor.in"], tapped["agent.in"]) == 3  # initialize, session/new, session/prompt
    assert assert_relayed(tapped["agent.out"], tapped["editor.out"]) >= 3  # the agent's requests to the client
    assert b"traceparent" not in tapped["editor.in"]  # the Rust client sends no trace context of its own
    assert summary["calls"] == ["session/request_permission", "fs/read_text_file", "_example.com/workspace/buffers"]
    assert summary["updates"].count("tool_call") == 3 and "agent_message_chunk" in summary["updates"]

    spans = sink.wait_for(
        lambda s: (
            any(x.service == AGENT_SERVICE and x.attributes.get("acp.method.name") == "session/prompt" for x in s)
            and any(x.service == PROXY_SERVICE and x.attributes.get("acp.method.name") == "session/prompt" for x in s)
            and len([x for x in s if x.service == AGENT_SERVICE and x.name.startswith("execute_tool")]) >= 3
        ),
        timeout=30,
    )
    proxy_turn = proxy_span(spans, "session/prompt")
    assert proxy_turn.parent_id is None  # the Rust client sent no trace context
    (agent_turn,) = [
        s
        for s in spans
        if s.service == AGENT_SERVICE and s.kind == "SERVER" and s.attributes.get("acp.method.name") == "session/prompt"
    ]
    assert agent_turn.trace_id == proxy_turn.trace_id and agent_turn.parent_id == proxy_turn.span_id
    # The traced agent makes the tool spans; the proxy makes none. All in the one trace.
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert {s.service for s in tools} == {AGENT_SERVICE} and len(tools) == 3
    assert {s.trace_id for s in tools} == {proxy_turn.trace_id}
    # The agent's calls back into the Rust client: agent CLIENT -> proxy CLIENT, in the trace; and the Rust SDK
    # handed the client's handler the traceparent the proxy wrote (the proxy's span).
    handed = {entry["method"]: entry["meta"] for entry in seen_log(seen)}
    assert set(handed) == {"session/request_permission", "fs/read_text_file", "_example.com/workspace/buffers"}
    for method in handed:
        ask = proxy_span(spans, method)
        (agent_ask,) = [
            s
            for s in spans
            if s.service == AGENT_SERVICE
            and s.kind == "CLIENT"
            and method in (s.name, s.attributes.get("acp.method.name"), "_" + str(s.attributes.get("acp.method.name")))
        ]
        assert ask.trace_id == proxy_turn.trace_id and ask.parent_id == agent_ask.span_id, method
        assert handed[method] is not None, method
        _, trace_id, span_id, _ = handed[method]["traceparent"].split("-")
        assert (trace_id, span_id) == (proxy_turn.trace_id, ask.span_id), method


@pytest.mark.parametrize(
    ("meta", "handed"),
    [
        ({"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01", **UNKNOWN_META}, "same"),
        ({}, "same"),
        ("not an object", None),
        ([1, 2], None),
        (None, None),
    ],
)
def test_rust_agent_handler_is_handed_meta_objects_only(
    rust_peers: Path, tmp_path: Path, meta: Any, handed: Any
) -> None:
    """Straight to the Rust agent (no proxy): an object ``_meta`` reaches the handler whole; one that is not an
    object (or null) reaches it as none, and the request is answered all the same."""
    seen = tmp_path / "seen.jsonl"
    request = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "_meta": meta}}
    done = subprocess.run(
        [str(rust_peers / "agent")],
        input=json.dumps(request) + "\n",
        env={**base_env(), "ACP_RUST_PEER_LOG": str(seen)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    (answer,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert answer["id"] == 0 and answer["result"]["agentInfo"]["name"] == "rust-test-agent", answer
    ((entry),) = seen_log(seen)
    assert entry["method"] == "initialize"
    assert entry["meta"] == (meta if handed == "same" else None)
    if handed == "same":
        assert list(entry["meta"]) == list(meta)  # in the order received
