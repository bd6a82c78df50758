"""The content scrubber of the agent's own telemetry (``acp_otel._proxy.agent_content``), on real OTLP protobuf
requests shaped as Gemini CLI, Qwen Code and OpenCode send them (their attribute keys and log bodies as recorded
from each agent against a sink, docs/agent-telemetry.md)."""

from __future__ import annotations

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from acp_otel._proxy.agent_content import scrub_logs, scrub_spans

SECRET = "CANARY-secret"


def _attrs(**values: str) -> list[KeyValue]:
    return [KeyValue(key=k.replace("__", "."), value=AnyValue(string_value=v)) for k, v in values.items()]


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _spans(*spans: Span) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])])


def _logs(*records: LogRecord) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=list(records))])])


def _keys(attributes: list[KeyValue]) -> list[str]:
    return [kv.key for kv in attributes]


def _model_call() -> Span:
    """Gemini CLI's ``llm_call`` with its prompts logged: messages and system instructions beside the tokens."""
    span = Span(name="llm_call", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    span.attributes.extend(
        [
            _kv("gen_ai.operation.name", "llm_call"),
            _kv("gen_ai.conversation.id", "s-1"),
            _kv("gen_ai.input.messages", f'[{{"role":"user","parts":[{{"text":"{SECRET}"}}]}}]'),
            _kv("gen_ai.output.messages", SECRET),
            _kv("gen_ai.system_instructions", SECRET),
            KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=1200)),
        ]
    )
    event = span.events.add(name="gen_ai.content")
    event.attributes.extend([_kv("gen_ai.prompt.0.content", SECRET), _kv("gen_ai.prompt.0.role", "user")])
    return span


def test_the_conventions_content_attributes_are_removed_from_spans_and_their_events() -> None:
    request = _spans(_model_call())
    assert scrub_spans(request, False, None) == 5
    (span,) = request.resource_spans[0].scope_spans[0].spans
    assert _keys(span.attributes) == ["gen_ai.operation.name", "gen_ai.conversation.id", "gen_ai.usage.input_tokens"]
    assert _keys(span.events[0].attributes) == []  # the indexed forms of older instrumentations too
    assert SECRET.encode() not in request.SerializeToString()


def test_nothing_is_removed_when_the_proxy_captures_content() -> None:
    request = _spans(_model_call())
    before = request.SerializeToString()
    assert scrub_spans(request, True, "gemini-cli") == 0
    assert request.SerializeToString() == before
    logs = _logs(LogRecord(attributes=_attrs(function_args=SECRET), body=AnyValue(string_value=SECRET)))
    assert scrub_logs(logs, True, "qwen-code") == 0 and SECRET.encode() in logs.SerializeToString()


def test_gemini_clis_log_events() -> None:
    """Its request and response texts, tool arguments and the conventions' detail event; the rest is kept."""
    records = [
        LogRecord(attributes=_attrs(event__name="gemini_cli.api_request", request_text=SECRET, model="m")),
        LogRecord(
            attributes=_attrs(event__name="gemini_cli.api_response", response_text=SECRET, total_token_count="9")
        ),
        LogRecord(
            attributes=_attrs(event__name="gemini_cli.tool_call", function_args=SECRET, function_name="read_file"),
            body=AnyValue(string_value="Tool call: read_file. Success: true. Duration: 3ms."),
        ),
        LogRecord(
            attributes=_attrs(
                event__name="gen_ai.client.inference.operation.details",
                gen_ai__input__messages=SECRET,
                gen_ai__output__messages=SECRET,
                gen_ai__system_instructions=SECRET,
                gen_ai__request__model="m",
            )
        ),
    ]
    request = _logs(*records)
    assert scrub_logs(request, False, "gemini-cli") == 6
    assert SECRET.encode() not in request.SerializeToString()
    kept = [_keys(r.attributes) for r in request.resource_logs[0].scope_logs[0].log_records]
    assert kept == [
        ["event.name", "model"],
        ["event.name", "total_token_count"],
        ["event.name", "function_name"],
        ["event.name", "gen_ai.request.model"],
    ]
    assert request.resource_logs[0].scope_logs[0].log_records[2].body.string_value.startswith("Tool call: read_file")


def test_qwen_codes_tool_arguments_and_sub_agent_answers_are_its_own_keys() -> None:
    """Qwen Code writes them whatever its prompt logging says; the keys are its own (``result``): another agent's
    ``result`` attribute is left alone."""
    record = LogRecord(
        attributes=_attrs(
            event__name="qwen-code.subagent_execution", result=SECRET, status="completed", session__id="s"
        )
    )
    tool = LogRecord(attributes=_attrs(event__name="qwen-code.tool_call", function_args=SECRET, call_id="call_1"))
    request = _logs(record, tool)
    assert scrub_logs(request, False, "qwen-code") == 2
    assert SECRET.encode() not in request.SerializeToString()
    assert _keys(request.resource_logs[0].scope_logs[0].log_records[1].attributes) == ["event.name", "call_id"]
    other = _logs(LogRecord(attributes=_attrs(result="ok")))
    assert scrub_logs(other, False, None) == 0 and _keys(other.resource_logs[0].scope_logs[0].log_records[0].attributes)


def test_opencodes_log_lines_keep_their_message_only() -> None:
    """OpenCode's INFO lines: ``[message, details]``, the details carrying paths and commands."""
    detail = f'{{"permission":"bash","pattern":"echo {SECRET}"}}'
    lines = [
        LogRecord(
            severity_text="INFO",
            body=AnyValue(
                array_value=ArrayValue(values=[AnyValue(string_value="asking"), AnyValue(string_value=detail)])
            ),
        ),
        LogRecord(severity_text="INFO", body=AnyValue(string_value="all LSPs are disabled")),
    ]
    request = _logs(*lines)
    assert scrub_logs(request, False, "opencode") == 1
    bodies = [r.body for r in request.resource_logs[0].scope_logs[0].log_records]
    assert [b.string_value for b in bodies] == ["asking", "all LSPs are disabled"]
    assert SECRET.encode() not in request.SerializeToString()
    # Another agent's array bodies are not cut (its lines are not known to carry details).
    other = _logs(
        LogRecord(
            body=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a"), AnyValue(string_value="b")]))
        )
    )
    assert scrub_logs(other, False, "gemini-cli") == 0


def test_the_former_genai_message_events_lose_their_body() -> None:
    request = _logs(
        LogRecord(attributes=_attrs(event__name="gen_ai.user.message"), body=AnyValue(string_value=SECRET)),
        LogRecord(attributes=_attrs(event__name="gen_ai.choice"), body=AnyValue(string_value=SECRET)),
        LogRecord(attributes=_attrs(event__name="session.start"), body=AnyValue(string_value="started")),
    )
    assert scrub_logs(request, False, None) == 2
    records = request.resource_logs[0].scope_logs[0].log_records
    assert [r.HasField("body") for r in records] == [False, False, True]
