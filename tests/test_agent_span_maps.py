"""The agents' own spans as the proxy forwards them under ``--agent-telemetry``: the profiles' span maps (the
conventions' names added where the span has the facts), the facts told to the engine, the filter of what a user
reads, and log records that arrive before their span. The spans are built as each agent really sends them
(DESIGN.md §10, read back through the proxy: names, kinds, attributes, the order they are exported in)."""

from __future__ import annotations

import random
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._agent_profiles import telemetry_of
from acp_otel._proxy.joiner import Joiner
from acp_otel._proxy.span_filter import READ
from acp_otel._proxy.span_mapping import SpanMapper

AGENT_TRACE = b"\x01" * 16
TURN_TRACE, TURN_SPAN = (0xAA).to_bytes(16, "big"), (0xBB).to_bytes(8, "big")
INTERNAL, CLIENT = 1, 3
_ids = iter(range(2, 1_000_000))


def _kv(key: str, value: Any) -> KeyValue:
    kv = KeyValue(key=key)
    if isinstance(value, str):
        kv.value.string_value = value
    else:
        kv.value.int_value = value
    return kv


def _span(name: str, parent: Span | None = None, kind: int = INTERNAL, start: int = 1500, **attrs: Any) -> Span:
    span = Span(name=name, trace_id=AGENT_TRACE, span_id=next(_ids).to_bytes(8, "big"), kind=kind)
    span.parent_span_id = parent.span_id if parent is not None else (0x99).to_bytes(8, "big")  # the process's
    span.start_time_unix_nano = start
    span.attributes.extend(_kv(k.replace("__", "."), v) for k, v in attrs.items())
    return span


def _request(*spans: Span) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend(spans)
    return request


def _attrs(span: Span) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}


def _forwarded(request: ExportTraceServiceRequest | None) -> list[Span]:
    if request is None:
        return []
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


class _Turn:
    def __init__(self) -> None:
        from opentelemetry.trace import NonRecordingSpan, SpanContext

        self.session_id = "sess-1"
        self.span = NonRecordingSpan(SpanContext(0xAA, 0xBB, is_remote=False))


def _joiner(profile: str, all_spans: bool = False, **kwargs: Any) -> tuple[Joiner, SpanMapper, list[Any]]:
    telemetry = telemetry_of(profile)
    facts: list[tuple[bool, bool]] = []
    joiner = Joiner(
        telemetry.session_id_keys,
        telemetry.tool_call_id_keys,
        lambda tools, usage: facts.append((tools, usage)),
        all_spans=all_spans,
        **kwargs,
    )
    joiner.turn_started(_Turn(), at_ns=1000)
    return joiner, SpanMapper(telemetry.span_maps), facts


# ---------------------------------------------------------------------- as each agent sends them


def gemini_turn() -> list[Span]:
    """Gemini CLI 0.61.0: an ``llm_call`` per model call, INTERNAL, a root, its own operation name, tokens, no
    provider."""
    calls = [
        _span(
            "llm_call",
            gen_ai__operation__name="llm_call",
            gen_ai__request__model="gemini-2.5-flash",
            gen_ai__usage__input_tokens=120,
            gen_ai__usage__output_tokens=7,
            gen_ai__conversation__id="sess-1",
        )
        for _ in range(3)
    ]
    for call in calls:
        call.parent_span_id = b""
    return calls


def qwen_turn(tool_call_id: str) -> list[Span]:
    """Qwen Code 0.24.4: the interaction, a model call with an HTTP POST under it, a tool and its execution."""
    interaction = _span("qwen-code.interaction", gen_ai__operation__name="invoke_agent", session__id="sess-1")
    llm = _span(
        "qwen-code.llm_request",
        interaction,
        gen_ai__operation__name="chat",
        gen_ai__provider__name="openai",
        gen_ai__request__model="qwen3",
        gen_ai__usage__input_tokens=90,
        gen_ai__usage__output_tokens=5,
    )
    post = _span("POST", llm, kind=CLIENT, http__request__method="POST")
    tool = _span(
        "qwen-code.tool",
        interaction,
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name="read_file",
        gen_ai__tool__call__id=tool_call_id,
    )
    execution = _span("qwen-code.tool.execution", tool, call_id=tool_call_id)
    return [post, llm, execution, tool, interaction]  # children end, and are exported, first


def opencode_turn(tool_call_ids: list[str], sql: int = 357) -> list[Span]:
    """OpenCode 1.18.33 with ``experimental.openTelemetry`` (as the proxy switches it): some 930 spans of its
    internals under the turn's loop (whose parent, the process's, it never exports); per model call ``LLM.run``
    without attributes, the AI SDK's ``ai.streamText`` under it and its provider call ``ai.streamText.doStream``
    (gen_ai.system, the model, the tokens, the prompt and the response), an HTTP POST under that, and an
    ``ai.toolCall`` beside it (its arguments and result); ``Tool.execute`` with ``tool.*``."""
    loop = _span("SessionPrompt.loop", session__id="sess-1")
    spans = [loop]
    for name in ("Session.get", "Config.get", "Plugin.trigger", "Provider.getModel", "Agent.get") * 75:
        holder = _span(name, loop)
        spans += [holder, _span("sql.execute", holder, db__system__name="sqlite")]
    spans += [_span("sql.execute", loop, db__system__name="sqlite") for _ in range(sql - 200)]
    for n in range(3):
        stream = _span("SessionProcessor.process", loop)
        llm = _span("LLM.run", stream)
        sdk = _span(
            "ai.streamText",
            llm,
            ai__operationId="ai.streamText",
            ai__prompt='{"messages":[]}',
            ai__usage__inputTokens=1300 + n,
            ai__usage__outputTokens=43,
        )
        call = _span(
            "ai.streamText.doStream",
            sdk,
            ai__operationId="ai.streamText.doStream",
            ai__prompt__messages="[]",
            gen_ai__system="local.chat",
            gen_ai__request__model="scripted-model",
            gen_ai__response__model="scripted-model",
            gen_ai__usage__input_tokens=1300 + n,
            gen_ai__usage__output_tokens=43,
        )
        tool_call = _span("ai.toolCall", sdk, ai__toolCall__name="read", ai__toolCall__id=f"call_{n}")
        spans += [stream, llm, sdk, call, _span("POST", call, kind=CLIENT, http__request__method="POST"), tool_call]
        spans += [_span("Plugin.trigger", llm), _span("sql.execute", stream)]
    for call in tool_call_ids:
        tool = _span("Tool.execute", loop, tool__name="read", tool__call_id=call, session__id="sess-1")
        spans += [tool, _span("sql.execute", tool), _span("Permission.ask", tool)]
    spans += [_span("GET", loop, kind=CLIENT, http__request__method="GET")]  # not inside a model call
    return spans[::-1]  # children first, as they end


# ---------------------------------------------------------------------- the profiles' span maps


def test_gemini_cli_model_calls_get_a_defined_operation_and_the_provider_its_own_value_kept() -> None:
    request = _request(*gemini_turn())
    SpanMapper(telemetry_of("gemini-cli").span_maps).apply(request)
    for span in _forwarded(request):
        attributes = _attrs(span)
        assert attributes["gen_ai.operation.name"] == "generate_content"
        assert attributes["gen_ai.provider.name"] == "gcp.gemini"
        assert attributes["acp.agent_span.operation.name"] == "llm_call"
        assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (120, 7)


def test_opencode_tool_execute_becomes_an_execute_tool_span_and_the_ai_sdks_provider_call_a_chat() -> None:
    request = _request(*opencode_turn(["toolu_1"]))
    SpanMapper(telemetry_of("opencode").span_maps).apply(request)
    (tool,) = [s for s in _forwarded(request) if s.name == "Tool.execute"]
    attributes = _attrs(tool)
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert (attributes["gen_ai.tool.name"], attributes["gen_ai.tool.call.id"]) == ("read", "toolu_1")
    assert "acp.agent_span.operation.name" not in attributes  # it sent none: nothing of its own changed
    assert attributes["tool.call_id"] == "toolu_1"  # its own attributes stay
    calls = [_attrs(s) for s in _forwarded(request) if s.name == "ai.streamText.doStream"]
    assert [(a["gen_ai.operation.name"], a["gen_ai.provider.name"]) for a in calls] == [("chat", "local")] * 3
    assert [a["gen_ai.usage.input_tokens"] for a in calls] == [1302, 1301, 1300]  # its tokens, as integers
    assert all(a["gen_ai.system"] == "local.chat" for a in calls)  # its own attributes stay
    # The rest is no model call and no tool call: LLM.run and ai.streamText wrap the provider call, ai.toolCall is
    # the tool call Tool.execute reports.
    others = ("LLM.run", "ai.streamText", "ai.toolCall", "sql.execute")
    assert all("gen_ai.operation.name" not in _attrs(s) for s in _forwarded(request) if s.name in others)


def test_qwen_code_spans_are_forwarded_as_they_came_and_unknown_agents_get_no_map() -> None:
    request = _request(*qwen_turn("call_1"))
    before = request.SerializeToString()
    SpanMapper(telemetry_of("qwen-code").span_maps).apply(request)
    SpanMapper(telemetry_of(None).span_maps).apply(_request(*gemini_turn()))
    assert request.SerializeToString() == before
    assert not SpanMapper(telemetry_of(None).span_maps)


# ---------------------------------------------------------------------- each fact once


def test_a_tool_call_is_the_agents_only_when_an_execute_tool_span_carries_its_gen_ai_tool_call_id() -> None:
    joiner, _, facts = _joiner("opencode")  # not mapped: tool.call_id alone is no report by the conventions
    joiner.join_spans(_request(*opencode_turn(["toolu_1"])))
    joiner.join_spans(_request(_span("Tool.execute", gen_ai__operation__name="execute_tool", tool__call_id="x")))
    assert facts == [(False, True)]  # the provider calls' tokens are usage even unmapped; no tool call
    joiner, mapper, facts = _joiner("opencode")  # mapped: its Tool.execute reports the tool call
    request = _request(*opencode_turn(["toolu_1"]))
    mapper.apply(request)
    joiner.join_spans(request)
    assert facts == [(True, True)]  # and the usage: the provider calls' tokens
    (tool,) = [s for s in _forwarded(joiner.release(everything=True)) if s.name == "Tool.execute"]
    assert joiner.tool_span(TURN_TRACE, "toolu_1") == tool.span_id  # the proxy's spans of the call go under it


def test_usage_is_the_agents_only_when_its_model_call_spans_carry_gen_ai_usage() -> None:
    joiner, mapper, facts = _joiner("gemini-cli")
    request = _request(*gemini_turn())
    mapper.apply(request)
    joiner.join_spans(request)
    assert facts == [(False, True)]
    joiner, mapper, facts = _joiner("qwen-code")
    joiner.join_spans(_request(*qwen_turn("call_1")))
    assert facts == [(True, True)]


# ---------------------------------------------------------------------- only what a user reads


def _check_nothing_dangles(spans: list[Span]) -> None:
    ids = {s.span_id for s in spans} | {TURN_SPAN}
    assert all(s.parent_span_id in ids and s.trace_id == TURN_TRACE for s in spans)


def test_opencode_turn_forwarded_under_a_hundred_spans_model_calls_tools_and_their_ancestors() -> None:
    joiner, mapper, _ = _joiner("opencode")
    sent = opencode_turn(["toolu_1", "toolu_2"])
    assert len(sent) > 900
    request = _request(*sent)
    mapper.apply(request)
    joiner.join_spans(request)  # all held for the loop's parent (the process's span, never exported)...
    assert _forwarded(request) == []
    out = _forwarded(joiner.release(everything=True))  # ...then joined under the turn
    names = sorted(s.name for s in out)
    assert names == sorted(
        [
            "SessionPrompt.loop",
            *["SessionProcessor.process", "LLM.run", "ai.streamText", "ai.streamText.doStream", "POST"] * 3,
        ]
        + ["Tool.execute"] * 2
    )
    assert len(out) < 100 and joiner.spans_left_out == len(sent) - len(out)
    _check_nothing_dangles(out)
    (loop,) = [s for s in out if s.name == "SessionPrompt.loop"]
    assert loop.parent_span_id == TURN_SPAN
    assert all(
        _attrs(s).get("gen_ai.operation.name") in READ
        for s in out
        if s.name in ("ai.streamText.doStream", "Tool.execute")
    )


def test_all_forwards_every_span() -> None:
    joiner, mapper, _ = _joiner("opencode", all_spans=True)
    sent = opencode_turn(["toolu_1"])
    request = _request(*sent)
    mapper.apply(request)
    joiner.join_spans(request)
    assert len(_forwarded(joiner.release(everything=True))) == len(sent) and joiner.spans_left_out == 0


def test_spans_in_the_turns_trace_already_keep_their_http_calls_and_a_later_ancestor() -> None:
    joiner, _, _ = _joiner("qwen-code")
    spans = qwen_turn("call_1")
    for span in spans:  # Qwen Code takes its parent from the turn's _meta: its spans are in the turn's trace
        span.trace_id = TURN_TRACE
    interaction = spans[-1]
    interaction.parent_span_id = TURN_SPAN
    wrapper = _span("qwen-code.session", parent=None)  # an ancestor of no operation, exported last
    wrapper.trace_id, wrapper.parent_span_id, interaction.parent_span_id = TURN_TRACE, TURN_SPAN, wrapper.span_id
    out: list[Span] = []
    for span in [*spans, wrapper]:  # one span a request: the POST before its model call, the wrapper last
        request = _request(span)
        joiner.join_spans(request)
        out += _forwarded(request)
    assert sorted(s.name for s in out) == sorted(
        ["POST", "qwen-code.llm_request", "qwen-code.tool", "qwen-code.interaction", "qwen-code.session"]
    )
    _check_nothing_dangles(out)


# ---------------------------------------------------------------------- logs with their spans


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _logs(*named: tuple[bytes, bytes]) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for trace_id, span_id in named:
        scope.log_records.add(trace_id=trace_id, span_id=span_id, time_unix_nano=1600)
    return request


def _records(request: ExportLogsServiceRequest | None) -> list[tuple[bytes, bytes]]:
    if request is None:
        return []
    return [(r.trace_id, r.span_id) for rl in request.resource_logs for sl in rl.scope_logs for r in sl.log_records]


def test_a_log_that_comes_before_its_span_waits_for_it_then_gets_its_trace() -> None:
    clock = _Clock()
    joiner, mapper, _ = _joiner("gemini-cli", clock=clock)
    calls = gemini_turn()
    never = (AGENT_TRACE, b"\x77" * 8)
    logs = _logs(*((AGENT_TRACE, c.span_id) for c in calls), never)
    joiner.join_logs(logs)  # Gemini CLI exports its logs first
    assert _records(logs) == [] and joiner.ready_logs() is None
    request = _request(*calls)
    mapper.apply(request)
    joiner.join_spans(request)
    assert _records(joiner.ready_logs()) == [(TURN_TRACE, c.span_id) for c in calls]
    assert joiner.ready_logs() is None  # the one naming a span that never comes waits for its bound
    from acp_otel._proxy import log_joining

    clock.now = log_joining.HOLD_S - 0.1
    assert joiner.ready_logs() is None
    clock.now = log_joining.HOLD_S
    assert _records(joiner.ready_logs()) == [never]  # then goes as it came


def test_logs_waiting_are_bounded_in_count_and_all_go_at_exit() -> None:
    from acp_otel._proxy import log_joining

    joiner, _, _ = _joiner("gemini-cli", clock=_Clock())
    many = [(AGENT_TRACE, random.randbytes(8)) for _ in range(log_joining.MAX_HELD + 2)]
    joiner.join_logs(_logs(*many))
    assert _records(joiner.ready_logs()) == many[:2] and joiner.logs_waiting() == log_joining.MAX_HELD
    assert _records(joiner.ready_logs(everything=True)) == many[2:] and joiner.logs_waiting() == 0
