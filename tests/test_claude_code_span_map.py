"""Claude Code's model-call spans, as its CLI sends them in ACP mode, get the GenAI conventions' names from its
profile's span map (docs/agent-telemetry.md, "What the proxy adds to the agent's spans")."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._agent_profiles import telemetry_of
from acp_otel._proxy.span_mapping import SpanMapper


def _kv(key: str, value: Any) -> KeyValue:
    kv = KeyValue(key=key)
    if isinstance(value, str):
        kv.value.string_value = value
    elif isinstance(value, bool):
        kv.value.bool_value = value
    else:
        kv.value.int_value = value
    return kv


def _attrs(span: Span) -> dict[str, Any]:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in span.attributes}


def test_claude_code_model_calls_become_chat_spans_with_model_provider_and_tokens() -> None:
    # Attributes as Claude Code 2.1.83 sends them (seen in tests/real_agents with its telemetry on).
    llm = Span(name="claude_code.llm_request", span_id=b"\x01" * 8, trace_id=b"\x02" * 16)
    own = {"span.type": "llm_request", "model": "claude-sonnet-4-6", "input_tokens": 1200, "output_tokens": 40}
    llm.attributes.extend(_kv(k, v) for k, v in {**own, "session.id": "sess-1", "success": True}.items())
    tool = Span(name="claude_code.tool", span_id=b"\x03" * 8, trace_id=b"\x02" * 16)
    tool.attributes.extend([_kv("span.type", "tool"), _kv("tool_name", "Read")])
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.extend([llm, tool])
    SpanMapper(telemetry_of("claude-code").span_maps).apply(request)
    llm, tool = request.resource_spans[0].scope_spans[0].spans
    attributes = _attrs(llm)
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-sonnet-4-6"
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (1200, 40)
    assert {k: attributes[k] for k in own} == own  # its own attributes stay
    # Its tool spans carry no tool call id: no execute_tool span of its own (the proxy's reports the call).
    assert "gen_ai.operation.name" not in _attrs(tool)
