"""The agent's own telemetry through ``acp-otel proxy --agent-telemetry``: received on loopback, joined to the
turns, forwarded to the user's backend (real processes: the synthetic agent ``tests/proxy_peers/otel_agent.py``
exports with the real OpenTelemetry SDK; the backend is a loopback OTLP receiver); the receiver's decoding over a
real socket; the joiner's hold bound."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import socket
import sys
import zlib
from typing import Any

import pytest
from acp_app import open_session, prompt
from harness import PEERS, base_env, proxied_client
from joiner_stubs import ManualClock as _Clock
from joiner_stubs import TurnStub as _Turn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from otlp_backend import Backend

from acp_otel._proxy.joiner import Joiner
from acp_otel._proxy.receiver import Receiver

OTEL_AGENT = [sys.executable, str(PEERS / "otel_agent.py")]
HEADER = ("x-backend-key", "sekret-4711")


def _env(endpoint: str, spans: str = "all", **extra: str) -> dict[str, str]:
    """The proxy's environment; every span of the agent's forwarded (the joining is under test) unless ``spans``
    says otherwise (``""``: the default)."""
    env = base_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_HEADERS=f"{HEADER[0]}={HEADER[1]}",
        OTEL_METRIC_EXPORT_INTERVAL="200",
        **extra,
    )
    if spans:
        env["OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS"] = spans
    return env


def _turns(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The proxy's turn spans."""
    return [
        s for s in spans if s["service"] == "proxy" and s["attributes"].get("gen_ai.operation.name") == "invoke_agent"
    ]


def _agent(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["service"] == "otel-agent" and s["name"] == name]


async def _run(
    backend: Backend,
    agent_args: list[str],
    sessions: int = 1,
    turns: int = 1,
    spans: str = "all",
    proxy_args: tuple[str, ...] = (),
    **env: str,
) -> Any:
    args = ["--service-name", "proxy", "--agent-telemetry", *proxy_args]
    async with proxied_client([*OTEL_AGENT, *agent_args], _env(backend.endpoint, spans, **env), args) as run:
        ids = [await open_session(run.conn)]
        for _ in range(sessions - 1):
            ids.append((await run.conn.new_session(cwd="/tmp", mcp_servers=[])).session_id)
        for _ in range(turns):
            await asyncio.gather(*(prompt(run.conn, sid, "hi") for sid in ids))
    run.extra["sessions"] = ids
    return run


pytestmark = pytest.mark.e2e


async def test_agent_spans_join_the_turn_each_fact_once_and_reach_the_backend_with_its_header() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--process-root"], turns=2)
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "shutdown")) == 1)
        spans = backend.spans()
    turns = sorted(_turns(spans), key=lambda s: s["attributes"].get("gen_ai.usage.input_tokens") is None)
    assert len(turns) == 2
    models = _agent(spans, "invoke_model")
    assert len(models) == 2
    turn_ids = {t["trace_id"]: t["span_id"] for t in turns}
    for model in models:  # the topmost span of the turn (its parent, the process span, never exported)
        assert turn_ids.get(model["trace_id"]) == model["parent"]
    assert {m["trace_id"] for m in models} == set(turn_ids)
    by_id = {m["span_id"]: m for m in models}
    for name in ("chat scripted", "execute_tool read"):  # exported before their parent: held, then joined
        children = _agent(spans, name)
        assert len(children) == 2
        for child in children:
            assert child["parent"] in by_id and child["trace_id"] == by_id[child["parent"]]["trace_id"]
    for name in ("startup", "shutdown"):  # before the first turn, after the last: left alone
        (alone,) = _agent(spans, name)
        assert alone["trace_id"] not in turn_ids and alone["parent"] is None
    assert all(s["resource"].get("acp.relay.service.name") == "proxy" for s in spans if s["service"] == "otel-agent")
    assert "CANARY" not in str(backend.requests["traces"])  # content scrubbed before forwarding (capture is off)
    # Each fact once: the first turn's tool call and usage reported by the proxy too, the second's by the agent only.
    proxy_tools = [s for s in spans if s["service"] == "proxy" and s["name"].startswith("execute_tool")]
    assert len(proxy_tools) == 1 and proxy_tools[0]["trace_id"] == turns[0]["trace_id"]
    assert "gen_ai.usage.input_tokens" in turns[0]["attributes"]
    assert "gen_ai.usage.input_tokens" not in turns[1]["attributes"]
    # The backend's header came with the agent's spans (the proxy forwarded them; the agent never had it).
    forwarded = [h for signal, h, m in backend.headers if signal == "traces" and "otel-agent" in str(m)]
    assert forwarded and all(h.get(HEADER[0]) == HEADER[1] for h in forwarded)


def _proxy(spans: list[dict[str, Any]], name: str, trace_id: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["service"] == "proxy" and s["name"] == name and s["trace_id"] == trace_id]


async def test_the_proxys_permission_and_fs_spans_go_under_the_agents_tool_span_once_it_reports_it() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--ask"], turns=2)
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "shutdown")) == 1)
        spans = backend.spans()
    turns = sorted(_turns(spans), key=lambda s: s["attributes"].get("gen_ai.usage.input_tokens") is None)
    assert len(turns) == 2
    # The first turn: the proxy's own tool span (the agent's report is not known yet) holds them, as before.
    first = turns[0]["trace_id"]
    (proxy_tool,) = [s for s in spans if s["service"] == "proxy" and s["name"].startswith("execute_tool")]
    assert proxy_tool["trace_id"] == first
    for name in ("session/request_permission", "fs/read_text_file"):
        (span,) = _proxy(spans, name, first)
        assert span["parent"] == proxy_tool["span_id"]
    # The second: no tool span of the proxy; they hang under the agent's execute_tool span of that tool call.
    second = turns[1]["trace_id"]
    (agent_tool,) = [s for s in _agent(spans, "execute_tool read") if s["trace_id"] == second]
    for name in ("session/request_permission", "fs/read_text_file"):
        (span,) = _proxy(spans, name, second)
        assert span["parent"] == agent_tool["span_id"]
        assert span["attributes"]["acp.tool_call.id"] == agent_tool["attributes"]["gen_ai.tool.call.id"]


async def test_the_agents_spans_of_a_tool_call_it_does_not_report_go_under_the_proxys_tool_span() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--tool-unreported"], turns=2)
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "shutdown")) == 1)
        spans = backend.spans()
    turns = _turns(spans)
    assert len(turns) == 2
    proxy_tools = [s for s in spans if s.get("service") == "proxy" and s["name"].startswith("execute_tool")]
    assert len(proxy_tools) == 2  # the agent never reports its tool calls: the proxy's tool span each turn
    by_call = {s["attributes"]["gen_ai.tool.call.id"]: s for s in proxy_tools}
    for own in _agent(spans, "run read"):  # the topmost of the call's spans hangs under the proxy's
        tool = by_call[own["attributes"]["gen_ai.tool.call.id"]]
        assert (own["trace_id"], own["parent"]) == (tool["trace_id"], tool["span_id"])
    runs = {s["span_id"] for s in _agent(spans, "run read")}
    assert len(runs) == 2 and all(s["parent"] in runs for s in _agent(spans, "read file"))  # the rest under it


async def test_the_proxys_spans_stay_under_the_turn_when_the_agent_never_reports_their_tool_call() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--ask", "--other-tool-id"], turns=2)
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "shutdown")) == 1)
        spans = backend.spans()
    turns = sorted(_turns(spans), key=lambda s: s["attributes"].get("gen_ai.usage.input_tokens") is None)
    second = turns[1]
    # Held for the agent's tool span, which never came: released at exit as they were (under the turn).
    for name in ("session/request_permission", "fs/read_text_file"):
        (span,) = _proxy(spans, name, second["trace_id"])
        assert span["parent"] == second["span_id"]
        assert span["attributes"]["acp.tool_call.id"].startswith("call-")


async def test_agent_logs_follow_their_span_and_metrics_are_forwarded() -> None:
    with Backend() as backend:
        run = await _run(backend, [])
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(
            lambda b: len(b.logs()) >= 2 and ("otel-agent", "gen_ai.client.token.usage.synthetic") in b.metric_names()
        )
        spans, logs = backend.spans(), backend.logs()
    (turn,) = _turns(spans)
    (chat,) = _agent(spans, "chat scripted")
    assert chat["trace_id"] == turn["trace_id"]
    answered = next(r for r in logs if r["body"] == "model answered")
    assert (answered["trace_id"], answered["span_id"]) == (turn["trace_id"], chat["span_id"])
    bare = next(r for r in logs if r["body"] == "no context here")  # no context: the turn's
    assert (bare["trace_id"], bare["span_id"]) == (turn["trace_id"], turn["span_id"])


async def test_agent_logs_exported_before_their_span_wait_for_it_and_get_its_trace() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--logs-first"])
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: any(r["body"] == "model answered" for r in b.logs()))
        spans, logs = backend.spans(), backend.logs()
    (turn,) = _turns(spans)
    (chat,) = _agent(spans, "chat scripted")
    answered = next(r for r in logs if r["body"] == "model answered")
    assert (answered["trace_id"], answered["span_id"]) == (turn["trace_id"], chat["span_id"])


async def test_by_default_only_what_a_user_reads_is_forwarded_and_nothing_dangles() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--internals"], turns=2, spans="", proxy_args=("-v",))
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "invoke_model")) == 2)
        assert backend.wait_for(lambda b: any(r["body"] == "row read" for r in b.logs()))
        spans, logs = backend.spans(), backend.logs()
    agent = [s for s in spans if s["service"] == "otel-agent"]
    # Model calls, tool calls, the HTTP call inside a model call and their ancestors; not the internals.
    assert sorted(s["name"] for s in agent) == sorted(
        ["invoke_model", "chat scripted", "execute_tool read", "POST"] * 2
    )
    ids = {(s["trace_id"], s["span_id"]) for s in spans}
    assert all((s["trace_id"], s["parent"]) in ids for s in agent)  # every parent forwarded: nothing dangles
    models = {s["span_id"]: s for s in _agent(spans, "invoke_model")}
    for post in _agent(spans, "POST"):
        assert _agent(spans, "chat scripted")[0]["name"] and post["parent"] in {
            c["span_id"] for c in _agent(spans, "chat scripted")
        }
    # A log record in a left-out span names its nearest forwarded ancestor.
    rows = [r for r in logs if r["body"] == "row read"]
    assert len(rows) == 2 and all(r["span_id"] in models for r in rows)
    assert {r["trace_id"] for r in rows} == {m["trace_id"] for m in models.values()}
    # -v says how many were left out (4 internals a turn, start-up, shutdown); the exit line is about losses only.
    assert "acp-otel proxy: 10 of the agent's spans left out" in run.stderr, run.stderr
    assert "acp-otel proxy: telemetry:" not in run.stderr


@pytest.mark.parametrize("option", [False, True], ids=["option-off", "option-on"])
async def test_a_known_agents_parent_keys_are_written_option_on_or_off(tmp_path: Any, option: bool) -> None:
    """An agent found from its script's package (Qwen Code's ``cli-entry``, behind an ``env`` wrapper) gets its
    own trace parent key in ``session/prompt``'s ``_meta`` beside the reserved one, whether the proxy receives its
    telemetry or not (a user who set Qwen Code's telemetry up themselves gets its traces joined)."""
    package = tmp_path / "node_modules" / "@qwen-code" / "qwen-code"
    package.mkdir(parents=True)
    (package / "package.json").write_text('{"name": "@qwen-code/qwen-code"}')
    script = package / "cli-entry.py"
    script.write_text((PEERS.parent / "peers" / "trace_agent.py").read_text())
    args = ["--service-name", "proxy", *(["--agent-telemetry"] if option else [])]
    with Backend() as backend:
        agent = ["env", "A=1", sys.executable, str(script)]
        async with proxied_client(agent, _env(backend.endpoint), args) as run:
            session_id = await open_session(run.conn)
            response = await prompt(run.conn, session_id, "echo-meta")
        assert run.returncode == 0, run.stderr
    seen = response.field_meta["kwargs"]
    assert sorted(seen) == ["qwen.telemetry.traceparent", "traceparent"]
    assert seen["qwen.telemetry.traceparent"] == seen["traceparent"]


async def test_an_agent_that_exports_only_at_exit_still_gets_its_spans_joined() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--export-at-exit"])
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "shutdown")) == 1)
        spans = backend.spans()
    (turn,) = _turns(spans)
    (model,) = _agent(spans, "invoke_model")
    assert (model["trace_id"], model["parent"]) == (turn["trace_id"], turn["span_id"])


async def test_two_sessions_at_once_joined_by_their_session_attribute() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--overlap", "2"], sessions=2)
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "shutdown")) == 1)
        spans = backend.spans()
    turns = {t["attributes"]["gen_ai.conversation.id"]: t for t in _turns(spans)}
    assert set(turns) == set(run.extra["sessions"])
    models = _agent(spans, "invoke_model")
    assert len(models) == 2
    for model in models:
        turn = turns[model["attributes"]["gen_ai.conversation.id"]]
        assert (model["trace_id"], model["parent"]) == (turn["trace_id"], turn["span_id"])


async def test_two_sessions_at_once_without_a_session_attribute_left_alone_and_linked() -> None:
    with Backend() as backend:
        run = await _run(backend, ["--overlap", "2", "--no-session"], sessions=2)
        assert run.returncode == 0, run.stderr
        assert backend.wait_for(lambda b: len(_agent(b.spans(), "shutdown")) == 1)
        spans = backend.spans()
    turns = {(t["trace_id"], t["span_id"]) for t in _turns(spans)}
    models = _agent(spans, "invoke_model")
    assert len(models) == 2 and len(turns) == 2
    for model in models:
        assert model["parent"] is None and model["trace_id"] not in {t for t, _ in turns}
        assert set(model["links"]) == turns
    chats = _agent(spans, "chat scripted")
    assert len(chats) == 2
    for chat in chats:  # the subtree stays with its topmost span
        assert chat["parent"] in {m["span_id"] for m in models} and not chat["links"]


async def test_forwarded_over_grpc_when_the_proxy_exports_grpc() -> None:
    from otlp_grpc_receiver import GrpcOtlpReceiver

    with GrpcOtlpReceiver() as backend:
        env = base_env(
            **backend.exporter_env(),
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
            OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS="all",
        )
        async with proxied_client(OTEL_AGENT, env, ["--service-name", "proxy", "--agent-telemetry"]) as run:
            session_id = await open_session(run.conn)
            await prompt(run.conn, session_id, "hi")
        assert run.returncode == 0, run.stderr
        spans = backend.wait_for(lambda got: any(s.name == "shutdown" for s in got))
    turn = next(s for s in spans if s.service_name == "proxy" and s.name.startswith("session/prompt"))
    model = next(s for s in spans if s.name == "invoke_model")
    assert (model.trace_id, model.parent_span_id) == (turn.trace_id, turn.span_id)
    assert model.resource_attributes.get("acp.relay.service.name") == "proxy"


async def test_an_agent_that_never_exports_costs_nothing_and_the_proxy_exits_as_before() -> None:
    from harness import PY_AGENT

    with Backend() as backend:
        env = _env(backend.endpoint, OTEL_METRICS_EXPORTER="none")
        async with proxied_client(PY_AGENT, env, ["--service-name", "proxy", "--agent-telemetry"]) as run:
            session_id = await open_session(run.conn)
            await prompt(run.conn, session_id, "hi")
        assert run.returncode == 0 and "acp-otel proxy:" not in run.stderr, run.stderr
        assert backend.wait_for(lambda b: len(_turns(b.spans())) == 1)
        assert all(s["service"] == "proxy" for s in backend.spans())


async def test_export_to_a_dead_endpoint_is_said_once_in_the_exit_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed when the block ends: nothing listens there
    env = _env(dead, OTEL_METRICS_EXPORTER="none")
    async with proxied_client(OTEL_AGENT, env, ["--service-name", "proxy", "--agent-telemetry"]) as run:
        session_id = await open_session(run.conn)
        await prompt(run.conn, session_id, "hi")
    assert run.returncode == 0  # exited by itself, within the harness's bound
    lines = [line for line in run.stderr.splitlines() if line.startswith("acp-otel proxy: telemetry:")]
    assert len(lines) == 1, run.stderr
    assert "of the agent's spans not forwarded to " + dead in lines[0] and "nothing is listening there" in lines[0]


def test_the_option_is_off_unless_the_flag_or_the_variable_turns_it_on() -> None:
    from acp_otel._proxy.options import options_from_args
    from acp_otel.cli import build_parser

    def parsed(flags: list[str], environ: dict[str, str]) -> bool:
        return options_from_args(build_parser().parse_args(["proxy", *flags, "--", "agent"]), environ).agent_telemetry

    assert parsed([], {}) is False
    assert parsed([], {"OTEL_PYTHON_ACP_AGENT_TELEMETRY": "on"}) is True
    assert parsed([], {"OTEL_PYTHON_ACP_AGENT_TELEMETRY": "off"}) is False
    assert parsed(["--agent-telemetry"], {}) is True
    assert parsed(["--no-agent-telemetry"], {"OTEL_PYTHON_ACP_AGENT_TELEMETRY": "on"}) is False


def test_the_agents_spans_forwarded_are_what_a_user_reads_unless_the_flag_or_the_variable_says_all() -> None:
    from acp_otel._proxy.options import options_from_args, plain_command
    from acp_otel.cli import build_parser

    def parsed(flags: list[str], environ: dict[str, str]) -> str:
        args = build_parser().parse_args(["proxy", *flags, "--", "agent"])
        return options_from_args(args, environ).agent_telemetry_spans

    variable = "OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS"
    assert parsed([], {}) == "genai"
    assert parsed([], {variable: "all"}) == "all"
    assert parsed([], {variable: "bogus"}) == "genai"
    assert parsed(["--agent-telemetry-spans", "all"], {}) == "all"
    assert parsed(["--agent-telemetry-spans", "genai"], {variable: "all"}) == "genai"
    plain = plain_command(["--", "agent"], {variable: "ALL"})
    assert plain is not None and plain.agent_telemetry_spans == "all"


# ---------------------------------------------------------------------- the receiver over a real socket


@pytest.fixture
def receiver() -> Any:
    from acp_otel._proxy.agent_telemetry import bind

    got: list[tuple[str, Any]] = []
    listener = bind()
    assert listener is not None
    server = Receiver(listener, lambda signal, message: got.append((signal, message)))
    yield server, got
    server.close()


def _post(port: int, path: str, body: Any, headers: dict[str, str]) -> tuple[int, bytes, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("POST", path, body=body, headers=headers, encode_chunked="Transfer-Encoding" in headers)
        answer = connection.getresponse()
        return answer.status, answer.read(), answer.getheader("Content-Type") or ""
    finally:
        connection.close()


def _trace_request() -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name, span.kind = bytes(range(1, 17)), bytes(range(1, 9)), "chat", 3
    return request


def test_receiver_takes_otlp_json_with_hex_ids_and_enum_numbers(receiver: Any) -> None:
    server, got = receiver
    body = json.dumps(
        {
            "resourceSpans": [
                {
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": bytes(range(1, 17)).hex(),
                                    "spanId": bytes(range(1, 9)).hex(),
                                    "name": "chat",
                                    "kind": 3,
                                    "unknownField": 1,
                                }
                            ]
                        }
                    ]
                }
            ]
        }
    )
    status, payload, content_type = _post(server.port, "/v1/traces", body, {"Content-Type": "application/json"})
    assert (status, payload, content_type) == (200, b"{}", "application/json")
    assert got == [("traces", _trace_request())]


def test_receiver_takes_gzip_deflate_and_chunked_protobuf(receiver: Any) -> None:
    server, got = receiver
    raw = _trace_request().SerializeToString()
    protobuf = {"Content-Type": "application/x-protobuf"}
    assert _post(server.port, "/v1/traces", gzip.compress(raw), {**protobuf, "Content-Encoding": "gzip"})[0] == 200
    assert _post(server.port, "/v1/traces", zlib.compress(raw), {**protobuf, "Content-Encoding": "deflate"})[0] == 200
    chunks = iter([raw[:5], raw[5:11], raw[11:]])
    assert _post(server.port, "/v1/traces", chunks, {**protobuf, "Transfer-Encoding": "chunked"})[0] == 200
    assert got == [("traces", _trace_request())] * 3


def test_receiver_refuses_what_it_cannot_read(receiver: Any) -> None:
    server, got = receiver
    assert _post(server.port, "/v1/traces", b"\xff\x00garbage", {"Content-Type": "application/x-protobuf"})[0] == 400
    assert _post(server.port, "/v1/traces", b"{not json", {"Content-Type": "application/json"})[0] == 400
    assert _post(server.port, "/v1/elsewhere", b"", {})[0] == 404
    assert got == [] and server.rejected == 2
    (said,) = server.problems()  # what the proxy's exit line says
    assert said.startswith("2 of the agent's export requests refused by the proxy's receiver (traces: not an OTLP/")


# ---------------------------------------------------------------------- the joiner's hold bound


def _request(*spans: tuple[bytes, bytes, bytes, int]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for trace_id, span_id, parent, start in spans:
        scope.spans.append(
            ProtoSpan(trace_id=trace_id, span_id=span_id, parent_span_id=parent, start_time_unix_nano=start)
        )
    return request


def _ids(request: ExportTraceServiceRequest | None) -> list[tuple[bytes, bytes, bytes]]:
    if request is None:
        return []
    return [
        (s.trace_id, s.span_id, s.parent_span_id)
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]


def test_joiner_holds_a_span_whose_parent_may_move_until_the_parent_comes_or_the_bound() -> None:
    clock = _Clock()
    joiner = Joiner(hold_s=5.0, clock=clock)
    turn = _Turn(0xAA, 0xBB)
    joiner.turn_started(turn, at_ns=1000)
    joiner.turn_ended(turn, at_ns=2000)
    agent_trace, turn_trace, turn_span = b"\x01" * 16, (0xAA).to_bytes(16, "big"), (0xBB).to_bytes(8, "big")
    top, child, late, orphan, missing = b"\x02" * 8, b"\x03" * 8, b"\x04" * 8, b"\x05" * 8, b"\x06" * 8
    # The child arrives first; its parent (started in the turn) next; background work after the turn last.
    first = _request((agent_trace, child, top, 1500))
    joiner.join_spans(first)
    assert _ids(first) == []  # held: its parent may be the turn's topmost span
    second = _request((agent_trace, top, b"", 1200), (agent_trace, late, top, 3000))
    joiner.join_spans(second)
    assert sorted(_ids(second)) == sorted(
        [(turn_trace, top, turn_span), (turn_trace, late, top), (turn_trace, child, top)]
    )
    # A span after the turn whose parent never comes: held (the others of its batch go on), then left as it came
    # once the bound is past.
    startup = b"\x07" * 8
    third = _request((agent_trace, startup, b"", 500), (agent_trace, orphan, missing, 4000))
    joiner.join_spans(third)
    assert _ids(third) == [(agent_trace, startup, b"")] and joiner.release() is None
    clock.now = 5.0
    assert _ids(joiner.release()) == [(agent_trace, orphan, missing)]
    assert joiner.held() == 0


# ---------------------------------------------------------------------- the forwarder's bounds


def test_forwarder_counts_what_it_could_not_send_and_says_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from acp_otel._proxy.forwarder import Forwarder

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", dead)
    forwarder = Forwarder(max_queued=1)
    for _ in range(5):  # sent and failed, or dropped when one waits already: counted either way
        forwarder.put("traces", _trace_request())
    assert forwarder.close(time.monotonic() + 10)
    account = forwarder.accounts["traces"]
    assert account.sent == 0 and account.failed + account.dropped == 5
    (line,) = forwarder.problems()
    assert line.startswith("5 of the agent's spans not forwarded to " + dead + "/v1/traces: nothing is listening")
    assert forwarder.problems() == [line]  # (AgentTelemetry.problems says it once)


def test_joiner_holds_at_most_max_held_spans_releasing_the_oldest_subtrees() -> None:
    joiner = Joiner(max_held=2, clock=_Clock())
    turn = _Turn(0xAA, 0xBB)
    joiner.turn_started(turn, at_ns=1000)
    agent_trace, turn_trace, turn_span = b"\x01" * 16, (0xAA).to_bytes(16, "big"), (0xBB).to_bytes(8, "big")
    first, second, third = (bytes([i]) * 8 for i in (2, 3, 4))
    for span_id in (first, second):
        request = _request((agent_trace, span_id, b"\x09" * 8, 1500))
        joiner.join_spans(request)
        assert _ids(request) == []
    request = _request((agent_trace, third, b"\x09" * 8, 1500))
    joiner.join_spans(request)  # one too many: the oldest goes, as if its parent did not exist (under the turn)
    assert _ids(request) == [(turn_trace, first, turn_span)] and joiner.held() == 2


# ------------------------------------------------------------ the proxy's own spans held for the agent's tool spans


def test_tool_parents_holds_marked_spans_until_the_tool_span_the_bound_or_the_release() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import set_span_in_context

    from acp_otel._proxy.tool_parents import ToolParents

    clock = _Clock()
    tools: dict[tuple[int, str], int] = {}
    inner = InMemorySpanExporter()
    held = ToolParents(inner, lambda trace_id, call: tools.get((trace_id, call)), hold_s=10, max_held=2, clock=clock)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(held))
    tracer = provider.get_tracer("t")
    turn = tracer.start_span("turn")
    under_turn = set_span_in_context(turn)

    def request(call: str, method: str = "fs/read_text_file") -> Any:
        span = tracer.start_span(method, under_turn, attributes={"acp.method.name": method, "acp.tool_call.id": call})
        span.end()
        return span

    def parents() -> dict[str, int | None]:
        out = {}
        for s in inner.get_finished_spans():
            out[str(s.attributes.get("acp.tool_call.id"))] = s.parent.span_id if s.parent is not None else None
        return out

    trace_id, turn_id = turn.get_span_context().trace_id, turn.get_span_context().span_id
    request("a")
    request("u", "session/update")  # an update's own tool call id: never held
    assert parents() == {"u": turn_id}
    tools[(trace_id, "a")] = 0xA
    request("b")  # any export looks at the held ones again: "a"'s tool span has come
    assert parents() == {"u": turn_id, "a": 0xA}
    clock.now = 11.0  # past the hold bound: "b" goes as it was
    request("c")
    assert parents() == {"u": turn_id, "a": 0xA, "b": turn_id}
    request("d")
    request("e")  # three held, two allowed: the oldest goes as it was
    assert parents()["c"] == turn_id and "d" not in parents()
    tools[(trace_id, "e")] = 0xE
    held.release()  # at exit: every one, under its tool span when that came
    assert parents() == {"u": turn_id, "a": 0xA, "b": turn_id, "c": turn_id, "d": turn_id, "e": 0xE}
    assert all(s.context.trace_id == trace_id for s in inner.get_finished_spans())
    request("f")  # after the release: never held; moved when its tool span came
    tools[(trace_id, "g")] = 0x6
    request("g")
    assert parents()["f"] == turn_id and parents()["g"] == 0x6
    provider.shutdown()


def test_the_proxys_tool_span_notes_never_stop_the_flush_of_the_processors_after_them() -> None:
    """The proxy's provider under ``--agent-telemetry``: the processor that notes its tool spans comes first; a
    flush must still reach the batch processor behind it (the base class of SDK 1.27 answers ``None``, which
    ends the provider's flush there, and the proxy's spans were never exported)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from acp_otel._proxy.proxy_tool_spans import ProxyToolSpans

    notes = ProxyToolSpans()
    inner = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(notes.processor())
    provider.add_span_processor(BatchSpanProcessor(inner, schedule_delay_millis=60_000))
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": "call-1"}
    span = provider.get_tracer("t").start_span("execute_tool read", attributes=attributes)
    span.end()
    assert provider.force_flush(5_000)
    assert [s.name for s in inner.get_finished_spans()] == ["execute_tool read"]
    context = span.get_span_context()
    assert notes.lookup(context.trace_id.to_bytes(16, "big"), "call-1") == context.span_id.to_bytes(8, "big")
    provider.shutdown()
