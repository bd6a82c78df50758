"""ACP over Streamable HTTP and WebSocket (SDK 1.0, extra ``http``), in real processes on loopback.

The agent is the SDK's ASGI app under uvicorn (``tests/remote_peers/agent_server.py``), the client the SDK's
HTTP or WebSocket client (``tests/remote_peers/client.py``), each traced or not, with or without the HTTP
instrumentations (Starlette on the agent, httpx on the client). Both write their spans as JSON lines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from sdk_versions import REMOTE_TRANSPORTS

PEERS = Path(__file__).resolve().parent / "remote_peers"
_MISSING = [m for m in ("uvicorn", "websockets", "httpx2", "starlette") if find_spec(m) is None]
_HTTP_INSTRUMENTATIONS = all(
    find_spec(m) is not None for m in ("opentelemetry.instrumentation.starlette", "opentelemetry.instrumentation.httpx")
)

pytestmark = [
    REMOTE_TRANSPORTS,
    pytest.mark.skipif(bool(_MISSING), reason=f"the SDK's 'http' extra and uvicorn are needed: missing {_MISSING}"),
    pytest.mark.e2e,
    pytest.mark.timeout(900),  # two Python processes with uvicorn, httpx and the SDK start per test: slow when loaded
]
needs_http_instrumentations = pytest.mark.skipif(
    not _HTTP_INSTRUMENTATIONS,
    reason="opentelemetry-instrumentation-starlette and -httpx are not installed",
)

TIMEOUT = 400  # seconds for one process step (generous: the machine may be busy)


@dataclass
class Run:
    """One scenario's outcome: what the client saw and both sides' spans."""

    out: dict[str, Any]
    client: list[dict[str, Any]]
    agent: list[dict[str, Any]]
    open_spans: dict[str, int] = field(default_factory=dict)
    port: int = 0

    @property
    def spans(self) -> list[dict[str, Any]]:
        return self.client + self.agent

    def acp(self, side: str) -> list[dict[str, Any]]:
        """The side's ACP spans (those with an acp.* or gen_ai.* attribute)."""
        spans = self.client if side == "client" else self.agent
        return [s for s in spans if any(k.startswith(("acp.", "gen_ai.", "rpc.")) for k in s["attributes"])]

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {s["span_id"]: s for s in self.spans}

    def parent(self, span: dict[str, Any]) -> dict[str, Any] | None:
        return self.by_id().get(span["parent_id"]) if span["parent_id"] else None

    def one(self, side: str, name: str, kind: str) -> dict[str, Any]:
        found = [
            s for s in (self.client if side == "client" else self.agent) if s["name"] == name and s["kind"] == kind
        ]
        assert len(found) == 1, (name, kind, [(s["name"], s["kind"]) for s in self.spans])
        return found[0]


def _read(path: Path) -> list[dict[str, Any]]:
    spans = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    for span in spans:  # a v1 turn is named `session/prompt {agent}`: the checks here are about methods
        if span["name"].startswith("session/prompt "):
            span["name"] = "session/prompt"
    return spans


@contextmanager
def agent_server(
    tmp: Path, traced: bool, starlette: bool, v2: bool = False
) -> Iterator[tuple[int, Path, subprocess.Popen[str]]]:
    spans = tmp / "agent.jsonl"
    args = [sys.executable, str(PEERS / "agent_server.py"), str(spans)]
    args += ["--traced"] * traced + ["--starlette"] * starlette + ["--v2"] * v2
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), f"agent server did not start: {line!r}"
        yield int(line.split()[1]), spans, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise


def run(
    tmp_path: Path,
    scenario: str,
    transport: str = "http",
    *,
    agent_traced: bool = True,
    client_traced: bool = True,
    http_spans: bool = False,
) -> Run:
    """Start the agent, run one client scenario against it, stop the agent; both sides' spans."""
    with agent_server(tmp_path, agent_traced, http_spans, scenario == "v2") as (port, agent_spans, _):
        client_spans = tmp_path / "client.jsonl"
        url = f"{'ws' if transport == 'ws' else 'http'}://127.0.0.1:{port}/acp"
        args = [sys.executable, str(PEERS / "client.py"), str(client_spans), url, scenario]
        args += ["--traced"] * client_traced + ["--httpx"] * http_spans
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert done.returncode == 0, done.stderr
    return Run(
        out=json.loads(done.stdout.strip().splitlines()[-1]),
        client=_read(client_spans),
        agent=_read(agent_spans),
        open_spans={side: int((tmp_path / f"{side}.jsonl.open").read_text()) for side in ("client", "agent")},
        port=port,
    )


def turns(run: Run, side: str) -> list[dict[str, Any]]:
    return [s for s in run.acp(side) if s["attributes"].get("gen_ai.operation.name") == "invoke_agent"]


# ---------------------------------------------------------------------------------------------------- tests


@needs_http_instrumentations
def test_http_requests_are_children_of_the_messages_they_carry(tmp_path: Path) -> None:
    r = run(tmp_path, "turns", "http", http_spans=True)
    assert r.out["stops"] == ["end_turn", "end_turn"]
    assert r.open_spans == {"client": 0, "agent": 0}
    # Every POST the client makes carries one message: its parent is that message's ACP span.
    posts = [s for s in r.client if s["kind"] == "CLIENT" and s["name"] == "POST"]
    assert posts
    for post in posts:
        parent = r.parent(post)
        assert parent is not None and parent in r.acp("client"), post
    carried = sorted({r.parent(p)["name"] for p in posts})  # type: ignore[index]
    assert carried == [
        "_test.dev/echo",
        "fs/read_text_file",
        "initialize",
        "session/new",
        "session/prompt",
        "session/request_permission",
    ]
    # The agent's HTTP server span of each POST continues the client's HTTP span (httpx's traceparent header).
    for post in posts:
        server = [s for s in r.agent if s["parent_id"] == post["span_id"] and s["kind"] == "SERVER"]
        assert len(server) == 1 and server[0]["name"] == "POST /acp", post
    # _meta wins over the POST's headers: the agent's turn continues the client's request span itself.
    for turn in turns(r, "agent"):
        parent = r.parent(turn)
        assert parent is not None and (parent["name"], parent["kind"]) == ("session/prompt", "CLIENT")
    # One trace per turn across the wire, with the permission under the tool call.
    for turn in turns(r, "client"):
        trace = [s for s in r.spans if s["trace_id"] == turn["trace_id"]]
        names = {(s["name"], s["kind"]) for s in trace}
        assert ("session/request_permission", "SERVER") in names and ("session/prompt", "SERVER") in names
        permission = next(s for s in trace if s["name"] == "session/request_permission" and s["kind"] == "CLIENT")
        assert r.parent(permission)["attributes"]["gen_ai.operation.name"] == "execute_tool"  # type: ignore[index]
    # The long-lived event streams are traces of their own, not part of initialize's.
    gets = [s for s in r.client if s["name"] == "GET"]
    assert gets and all(s["parent_id"] is None for s in gets)


@needs_http_instrumentations
def test_websocket_frames_go_under_the_span_of_the_message_they_carry(tmp_path: Path) -> None:
    r = run(tmp_path, "turns", "ws", http_spans=True)
    assert r.out["stops"] == ["end_turn", "end_turn"]
    assert r.open_spans == {"client": 0, "agent": 0}
    sends = [s for s in r.agent if s["name"].endswith("websocket send")]
    parents = [r.parent(s) for s in sends]
    # The frame carrying request_permission is under the agent's CLIENT span of it, the frames of responses
    # under their SERVER spans (initialize's response is the only frame that initialize's span can hold).
    permission = [p for p in parents if p and p["name"] == "session/request_permission" and p["kind"] == "CLIENT"]
    assert len(permission) == 2
    initialize = r.one("agent", "initialize", "SERVER")
    assert sum(1 for p in parents if p is initialize) == 1
    new_session = r.one("agent", "session/new", "SERVER")
    assert sum(1 for p in parents if p is new_session) == 1


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_spans_name_their_connection_and_peer(tmp_path: Path, transport: str) -> None:
    r = run(tmp_path, "turns", transport)
    # Request spans are released once answered (kept, they would grow with every request of the connection):
    # the client holds none after its turns, the agent at most the prompt in progress.
    assert r.out["held_server_spans"] == 0
    held = json.loads((tmp_path / "agent.jsonl.held").read_text())
    assert len(held) == 2 and max(held) <= 1, held
    protocol = "websocket" if transport == "ws" else "http"
    ids = {
        s["attributes"].get("acp.connection.id") for s in r.acp("client") + r.acp("agent") if s["kind"] != "INTERNAL"
    }
    assert len(ids) == 1 and None not in ids, ids
    for span in r.acp("client"):
        if span["kind"] == "INTERNAL":
            continue
        a = span["attributes"]
        assert (a["network.transport"], a["network.protocol.name"]) == ("tcp", protocol), span
        assert (a["server.address"], a["server.port"]) == ("127.0.0.1", r.port), span
        assert "client.address" not in a
    for span in r.acp("agent"):
        if span["kind"] == "INTERNAL":
            continue
        a = span["attributes"]
        assert (a["network.transport"], a["network.protocol.name"], a["client.address"]) == (
            "tcp",
            protocol,
            "127.0.0.1",
        )
        assert "server.address" not in a


@pytest.mark.parametrize("starlette", [False, True], ids=["header", "http-server-span"])
@needs_http_instrumentations
def test_the_http_request_context_parents_a_message_without_meta_context(tmp_path: Path, starlette: bool) -> None:
    """An editor with HTTP tracing only: its POSTs carry traceparent headers, its messages no _meta context."""
    with agent_server(tmp_path, True, starlette) as (port, agent_spans, _):
        args = [sys.executable, str(PEERS / "client.py"), str(tmp_path / "c.jsonl"), f"http://127.0.0.1:{port}/acp"]
        done = subprocess.run([*args, "turns", "--httpx"], capture_output=True, text=True, timeout=TIMEOUT, check=False)
        assert done.returncode == 0, done.stderr
    client, agent = _read(tmp_path / "c.jsonl"), _read(agent_spans)
    by_id = {s["span_id"]: s for s in client + agent}
    prompts = [s for s in agent if s["name"] == "session/prompt" and s["kind"] == "SERVER"]
    assert len(prompts) == 2
    for span in prompts:
        parent = by_id[span["parent_id"]]
        if starlette:  # the HTTP server span of the POST, itself the child of the client's POST
            assert (parent["name"], parent["kind"]) == ("POST /acp", "SERVER")
            parent = by_id[parent["parent_id"]]
        assert (parent["name"], parent["kind"]) == ("POST", "CLIENT")
        # The whole turn on the agent is in that trace: the tool call and the permission request.
        in_trace = {s["name"] for s in agent if s["trace_id"] == span["trace_id"]}
        assert {"session/request_permission", "fs/read_text_file"} <= in_trace


@pytest.mark.parametrize("transport", ["http", "ws"])
@pytest.mark.parametrize(("client_traced", "agent_traced"), [(False, False), (True, False), (False, True)])
def test_what_the_client_sees_does_not_depend_on_tracing(
    tmp_path: Path, transport: str, client_traced: bool, agent_traced: bool
) -> None:
    r = run(tmp_path, "turns", transport, client_traced=client_traced, agent_traced=agent_traced)
    seen = {k: v for k, v in r.out.items() if k != "held_server_spans"}  # the tracing's own bookkeeping
    assert seen == {"session": "sess-1", "stops": ["end_turn", "end_turn"]}
    assert bool(r.acp("client")) == client_traced and bool(r.acp("agent")) == agent_traced
    assert r.open_spans == {"client": 0, "agent": 0}
    if client_traced:  # an untraced agent: the client's own turn spans make the tool calls
        assert len(turns(r, "client")) == 2


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_a_cancelled_request_ends_on_both_sides(tmp_path: Path, transport: str) -> None:
    r = run(tmp_path, "cancel", transport)
    assert r.out == {"session": "sess-1", "cancelled": True, "after": "end_turn"}
    assert r.open_spans == {"client": 0, "agent": 0}
    # The cancelled turn (no stop reason): one trace, the $/cancel_request under the request it cancels.
    client_turn, agent_turn = (
        next(s for s in turns(r, side) if "acp.stop_reason" not in s["attributes"]) for side in ("client", "agent")
    )
    assert agent_turn["parent_id"] == client_turn["span_id"] and agent_turn["ended"]
    cancel = r.one("client", "$/cancel_request", "PRODUCER")
    assert cancel["parent_id"] == client_turn["span_id"]


def test_load_and_resume_replay_in_their_requests_traces(tmp_path: Path) -> None:
    r = run(tmp_path, "load", "http")
    assert r.out == {"session": "sess-1", "stops": ["end_turn"], "replayed": 1, "resumed": True}
    assert r.open_spans == {"client": 0, "agent": 0}
    load_client = r.one("client", "session/load", "CLIENT")
    load_agent = r.one("agent", "session/load", "SERVER")
    assert load_agent["parent_id"] == load_client["span_id"]
    resume_agent = r.one("agent", "session/resume", "SERVER")
    assert resume_agent["parent_id"] == r.one("client", "session/resume", "CLIENT")["span_id"]
    # The second connection has an id of its own.
    first = r.one("agent", "session/new", "SERVER")["attributes"]["acp.connection.id"]
    assert load_agent["attributes"]["acp.connection.id"] not in (None, first)
    assert load_client["attributes"]["acp.connection.id"] == load_agent["attributes"]["acp.connection.id"]


def test_an_event_stream_dropping_mid_turn_leaves_nothing_open(tmp_path: Path) -> None:
    r = run(tmp_path, "drop", "http")
    assert r.out == {"session": "sess-1", "error": "ConnectionError"}
    assert r.open_spans == {"client": 0, "agent": 0}
    client_turn = next(iter(turns(r, "client")))
    assert client_turn["status"] == "ERROR" and client_turn["attributes"]["error.type"] == "ConnectionError"
    agent_turn = next(iter(turns(r, "agent")))
    assert agent_turn["ended"] and agent_turn["trace_id"] == client_turn["trace_id"]


def test_an_acp_v2_turn_over_http(tmp_path: Path) -> None:
    r = run(tmp_path, "v2", "http")
    assert r.out == {"session": "v2-sess", "accepted": "m-1", "updates": 5}
    assert r.open_spans == {"client": 0, "agent": 0}
    client_turn, agent_turn = (next(iter(turns(r, side))) for side in ("client", "agent"))
    request_c, request_s = r.one("client", "session/prompt", "CLIENT"), r.one("agent", "session/prompt", "SERVER")
    # The v2 turn shape over HTTP: the client's turn wraps its request; the agent's turn is beside its SERVER
    # span; the permission (sent on the event stream) is under the agent's tool call, in the same trace.
    assert request_c["parent_id"] == client_turn["span_id"]
    assert agent_turn["parent_id"] == request_s["parent_id"] == request_c["span_id"]
    permission = r.one("agent", "session/request_permission", "CLIENT")
    assert r.parent(permission)["attributes"]["gen_ai.operation.name"] == "execute_tool"  # type: ignore[index]
    assert r.one("client", "session/request_permission", "SERVER")["parent_id"] == permission["span_id"]
    assert agent_turn["attributes"]["acp.stop_reason"] == "end_turn"
