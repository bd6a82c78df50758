"""What the joiner learns from an agent's spans (``acp_otel._proxy.agent_facts``): the facts told to the engine once
each, the agent's spans of a tool call hung under the proxy's span of it, the proxy told of a tool span."""

from __future__ import annotations

from collections.abc import Callable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy.agent_facts import MAX_KNOWN_TOOLS, AgentFacts

TRACE = b"\x01" * 16
PROXY_SPAN = b"\x09" * 8


def _span(name: str, parent: bytes = b"", call: str | None = None, tool: bool = False, usage: bool = False) -> Span:
    span = Span(name=name, trace_id=TRACE, span_id=name.encode().ljust(8, b"_"), parent_span_id=parent)
    if call is not None:
        span.attributes.add(key="gen_ai.tool.call.id").value.string_value = call
    if tool:
        span.attributes.add(key="gen_ai.operation.name").value.string_value = "execute_tool"
    if usage:
        span.attributes.add(key="gen_ai.usage.input_tokens").value.int_value = 3
    return span


def _request(*spans: Span) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request


def _recorder(into: list[tuple[bool, bool]]) -> Callable[[bool, bool], None]:
    return lambda tools, usage: into.append((tools, usage))


def test_each_fact_is_told_once_whichever_comes_first() -> None:
    tool, usage = _span("tool", call="c1", tool=True), _span("llm", usage=True)
    for first, second, told in (
        (tool, usage, [(True, False), (False, True)]),
        (usage, tool, [(False, True), (True, False)]),
    ):
        facts: list[tuple[bool, bool]] = []
        agent = AgentFacts((), _recorder(facts))
        agent.note_request(_request(first))
        agent.note_request(_request(second))
        agent.note_request(_request(tool, usage))
        assert facts == told


def test_a_tool_call_s_topmost_span_goes_under_the_proxy_s_span_of_it() -> None:
    agent = AgentFacts((), None)
    agent.proxy_tool_span = lambda trace, call: PROXY_SPAN if (trace, call) == (TRACE, "c1") else None
    top = _span("top", parent=b"p" * 8, call="c1")
    child = _span("child", parent=top.span_id, call="c1")
    other = _span("other", parent=b"p" * 8, call="c2")
    for span in (top, child, other):
        agent.note_tool(span)
    assert top.parent_span_id == PROXY_SPAN
    assert child.parent_span_id == top.span_id  # under a span of the same call already
    assert other.parent_span_id == b"p" * 8  # the proxy made no span of that call


def test_the_proxy_is_told_of_a_tool_span_once() -> None:
    agent = AgentFacts((), None)
    told: list[int] = []
    agent.on_tool_span = lambda: told.append(1)
    agent.tell_tools()
    assert told == []
    tool = _span("tool", call="c1", tool=True)
    agent.note_tool(tool)
    agent.tell_tools()
    agent.tell_tools()
    assert told == [1] and agent.tool_span(TRACE, "c1") == tool.span_id


def _numbered(n: int, call: str, parent: bytes = b"", tool: bool = False) -> Span:
    span = _span("s", parent=parent, call=call, tool=tool)
    span.span_id = n.to_bytes(8, "big")
    return span


def test_past_4096_tool_spans_the_oldest_is_forgotten_first() -> None:
    agent = AgentFacts((), None)
    for n in range(MAX_KNOWN_TOOLS + 1):  # one more than the bound
        agent.note_tool(_numbered(n + 1, f"c{n}", tool=True))
    assert agent.tool_span(TRACE, "c0") is None
    assert agent.tool_span(TRACE, "c1") == (2).to_bytes(8, "big")
    assert agent.tool_span(TRACE, f"c{MAX_KNOWN_TOOLS}") == (MAX_KNOWN_TOOLS + 1).to_bytes(8, "big")


def test_past_4096_spans_of_tool_calls_the_oldest_is_forgotten_first() -> None:
    agent = AgentFacts((), None)
    agent.proxy_tool_span = lambda trace, call: PROXY_SPAN
    for n in range(MAX_KNOWN_TOOLS + 1):  # the topmost span of each call: under the proxy's span
        agent.note_tool(_numbered(n + 1, f"c{n}", parent=b"p" * 8))
    first, second, last = (
        _numbered(0x10000 + n, f"c{n}", parent=(n + 1).to_bytes(8, "big")) for n in (0, 2, MAX_KNOWN_TOOLS)
    )
    for child in (second, first, last):  # each noted is remembered in turn: the oldest (id 2) then goes
        agent.note_tool(child)
    assert first.parent_span_id == PROXY_SPAN  # its parent forgotten: taken for the topmost span of its call
    assert second.parent_span_id == (3).to_bytes(8, "big")  # its parent remembered: it stays under it
    assert last.parent_span_id == (MAX_KNOWN_TOOLS + 1).to_bytes(8, "big")
