"""Tool calls through a real ``acp-otel proxy`` process: an untraced agent (the proxy makes the tool spans) and a
traced one (the agent does; the proxy's spans follow the context it propagates), and the extra trace-context
keys spliced into the forwarded bytes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import corpus
import pytest
from acp_app import TraceClient, open_session, prompt
from harness import PROXY, PY_AGENT, RAW_PEER, base_env, proxied_client
from otlp_sink import OtlpSink, Span

pytestmark = pytest.mark.e2e

DECISION_S = 0.2  # how long the "user" takes to grant a permission


@pytest.fixture
def sink() -> Any:
    with OtlpSink() as s:
        yield s


def _of(spans: list[Span], service: str) -> list[Span]:
    return [s for s in spans if s.service == service]


def _tools(spans: list[Span]) -> dict[str, Span]:
    return {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in spans
        if s.attributes.get("gen_ai.operation.name") == "execute_tool"
    }


def _turn(spans: list[Span]) -> Span:
    (turn,) = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    return turn


def _requests(spans: list[Span]) -> list[Span]:
    return sorted((s for s in spans if s.name.startswith(("fs/", "terminal/"))), key=lambda s: s.start_ns)


def _has_tools(service: str, count: int) -> Any:
    def done(spans: list[Span]) -> bool:
        mine = _of(spans, service)
        return len(_tools(mine)) >= count and any(s.name.partition(" ")[0] == "session/prompt" for s in mine)

    return done


async def test_permission_first_untraced_agent_the_proxy_opens_the_tool_call(sink: OtlpSink) -> None:
    client = TraceClient()
    client.permission_delay = DECISION_S
    async with proxied_client([*PY_AGENT, "tools"], base_env(**sink.env()), ["--service-name", "proxy"], client) as run:
        session_id = await open_session(run.conn)
        await prompt(run.conn, session_id, "codex")
    assert run.returncode == 0
    spans = _of(sink.wait_for(_has_tools("proxy", 1)), "proxy")
    tool = _tools(spans)["call_3"]
    assert tool.parent_id == _turn(spans).span_id and tool.name == "execute_tool execute"
    assert tool.events == ["acp.tool_call.status"] * 3  # pending (the permission), in_progress, completed
    ask = next(s for s in spans if s.name == "session/request_permission")
    assert ask.kind == "CLIENT" and ask.parent_id == tool.span_id  # it stands for the agent's request
    assert tool.start_ns <= ask.start_ns and ask.end_ns <= tool.end_ns  # the decision time is inside
    assert (ask.end_ns - ask.start_ns) / 1e9 >= DECISION_S


async def test_kimi_tools_untraced_agent_names_from_titles_and_requests_under_their_tools(sink: OtlpSink) -> None:
    env = base_env(**sink.env(), OTEL_PYTHON_ACP_TOOL_NAMES_FROM_TITLES="true")
    async with proxied_client([*PY_AGENT, "tools"], env, ["--service-name", "proxy"]) as run:
        session_id = await open_session(run.conn)
        await prompt(run.conn, session_id, "kimi")
    spans = _of(sink.wait_for(_has_tools("proxy", 2)), "proxy")
    tools = _tools(spans)
    assert {t: s.name for t, s in tools.items()} == {
        "k/call_1": "execute_tool ReadFile",
        "k/call_2": "execute_tool Shell",
    }
    requests = _requests(spans)
    assert [(r.name, r.parent_id) for r in requests] == [
        ("fs/read_text_file", tools["k/call_1"].span_id),
        ("terminal/create", tools["k/call_2"].span_id),
        ("terminal/wait_for_exit", tools["k/call_2"].span_id),
        ("terminal/output", tools["k/call_2"].span_id),
        ("terminal/release", tools["k/call_2"].span_id),
    ]
    assert not any("notes.txt" in repr(s.attributes) for s in spans)


async def test_two_tools_open_untraced_agent_the_proxy_links_by_terminal_id(sink: OtlpSink) -> None:
    async with proxied_client([*PY_AGENT, "tools"], base_env(**sink.env()), ["--service-name", "proxy"]) as run:
        session_id = await open_session(run.conn)
        await prompt(run.conn, session_id, "two-open")
    spans = _of(sink.wait_for(_has_tools("proxy", 3)), "proxy")
    tools, turn = _tools(spans), _turn(spans)
    assert [(r.name, r.parent_id) for r in _requests(spans)] == [
        ("terminal/create", turn.span_id),
        ("terminal/output", tools["a"].span_id),
        ("fs/read_text_file", turn.span_id),
        ("fs/write_text_file", tools["a"].span_id),
        ("terminal/release", turn.span_id),  # its tool call has ended; c, open alone, has nothing to do with it
    ]


async def test_traced_agent_its_tool_spans_and_the_proxy_follows_its_context(sink: OtlpSink) -> None:
    """The agent (traced with acp-otel) makes the tool spans and links its requests; the proxy makes none and
    its span for each request is the child of the agent's."""
    env = base_env(**sink.env(), ACP_OTEL_TEST_SPANS="otlp")
    async with proxied_client(sink.for_agent(*PY_AGENT, "tools"), env, ["--service-name", "proxy"]) as run:
        session_id = await open_session(run.conn)
        await prompt(run.conn, session_id, "kimi")
    spans = sink.wait_for(lambda s: _has_tools("test-agent", 2)(s) and len(_requests(_of(s, "proxy"))) >= 5)
    agent, proxy = _of(spans, "test-agent"), _of(spans, "proxy")
    assert not _tools(proxy)
    tools = _tools(agent)
    agent_requests = [s for s in _requests(agent) if s.kind == "CLIENT"]
    assert [r.parent_id for r in agent_requests] == [tools["k/call_1"].span_id] + [tools["k/call_2"].span_id] * 4
    proxy_requests = _requests(proxy)
    assert [r.parent_id for r in proxy_requests] == [r.span_id for r in agent_requests]


def test_extra_trace_keys_spliced_into_the_bytes(tmp_path: Path, sink: OtlpSink) -> None:
    """With extra_trace_keys=qwen the proxy writes Qwen Code's keys beside the reserved ones: stale values replaced
    in place, missing keys appended, every other byte as sent."""
    tp = corpus.TP_VALID
    lines = [
        (
            b'{ "jsonrpc" : "2.0" , "id" : 1 , "method" : "session/prompt" , '
            b'"params" : { "sessionId" : "s" , "prompt" : [ ] } }',
            b'{ "jsonrpc" : "2.0" , "id" : 1 , "method" : "session/prompt" , '
            b'"params" : { "sessionId" : "s" , "prompt" : [ ],'
            b'"_meta":{"traceparent":"{TP}","qwen.telemetry.traceparent":"{TP}"} } }',
        ),
        (
            b'{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","_meta":{'
            b'"qwen.telemetry.traceparent":"stale","x":[1, 2],"traceparent":"' + tp.encode() + b'",'
            b'"tracestate":"k=v"}}}',
            b'{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"s","_meta":{'
            b'"qwen.telemetry.traceparent":"{TP}","x":[1, 2],"traceparent":"{TP}",'
            b'"tracestate":"k=v","qwen.telemetry.tracestate":"k=v"}}}',
        ),
        (b'{"jsonrpc":"2.0","id":7,"result":{"stopReason":"end_turn"}}',) * 2,  # a response: untouched
    ]
    record, send = tmp_path / "agent-received", tmp_path / "agent-sends"
    send.write_bytes(b"")
    env = base_env(**sink.env(), OTEL_PYTHON_ACP_EXTRA_TRACE_KEYS="qwen")
    done = subprocess.run(
        [*PROXY, "--", *RAW_PEER, str(record), str(send)],
        input=b"".join(sent + b"\n" for sent, _ in lines),
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == b""
    received = record.read_bytes().split(b"\n")
    assert received[-1] == b"" and len(received) == len(lines) + 1
    for got, (_, want) in zip(received, lines, strict=False):
        match = corpus.TP_RE.search(got)
        if b"{TP}" in want:
            assert match is not None, got
            want = want.replace(b"{TP}", match.group(1))
        assert got == want
    # the proxy's span continued the sender's trace in the second line
    assert corpus.TRACE_ID.encode() in received[1]
