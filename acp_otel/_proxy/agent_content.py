"""Content in an agent's own telemetry, removed before the proxy forwards it (unless the proxy captures content).

Pure: works in place on the ``opentelemetry.proto`` export requests the proxy's receiver decoded. What counts as
content: the attributes the OpenTelemetry GenAI conventions mark as content (messages, system instructions, tool
call arguments and results, and their former indexed and event forms), and what the known agents write of their
own (found by running each against a sink, and in their sources; docs/agent-telemetry.md): Gemini CLI's and Qwen
Code's prompt, request, response and tool-argument attributes (Qwen Code writes tool arguments and sub-agent answers
whatever its prompt logging says), OpenCode's log lines, whose details carry file paths and shell commands, and the
AI SDK's prompt, response and tool-call attributes on OpenCode's spans.

A removed attribute is gone (key and value); a removed log body is emptied, or, for OpenCode's lines, cut to their
message. Each removal counts one.
"""

from __future__ import annotations

from collections.abc import MutableSequence

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

# The GenAI conventions' content attributes (opt-in there: "may contain sensitive information").
CONVENTION_KEYS = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.prompt",  # deprecated forms, still written by instrumentations
        "gen_ai.completion",
    }
)
# Indexed forms of older instrumentations (``gen_ai.prompt.0.content``, ``gen_ai.completion.0.tool_calls...``).
CONVENTION_PREFIXES = ("gen_ai.prompt.", "gen_ai.completion.")
# Log events of the former GenAI event conventions whose body is a message.
CONTENT_EVENTS = frozenset(
    {
        "gen_ai.system.message",
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.tool.message",
        "gen_ai.choice",
    }
)
EVENT_NAME = "event.name"

# What the known agents write of their own (by profile key): attribute keys on spans and log records.
AGENT_KEYS: dict[str, frozenset[str]] = {
    "gemini-cli": frozenset({"prompt", "request_text", "response_text", "function_args", "response"}),
    "qwen-code": frozenset(
        {
            "prompt",
            "request_text",
            "response_text",
            "function_args",
            "result",  # qwen-code.subagent_execution: the sub-agent's answer
            "execution_summary",
            "input.value",  # its sensitive span attributes (QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES)
            "output.value",
        }
    ),
    # Its events' and spans' prompt, system prompt, tool input and output; its tool spans' file path and shell
    # command (written whatever its switches say).
    "claude-code": frozenset(
        {
            "file_path",
            "full_command",
            "user_prompt",
            "prompt",
            "system_prompt",
            "tool_parameters",
            "tool_input",
            "tool.output",
            "response.model_output",
        }
    ),
    # The AI SDK's spans of its model and tool calls (``experimental.openTelemetry``): prompt, messages, tool
    # definitions, response text, tool calls with their arguments and results; its metadata's user id (a user name).
    "opencode": frozenset(
        {
            "ai.prompt",
            "ai.prompt.messages",
            "ai.prompt.tools",
            "ai.response.text",
            "ai.response.reasoning",
            "ai.response.toolCalls",
            "ai.response.object",
            "ai.toolCall.args",
            "ai.toolCall.result",
            "ai.telemetry.metadata.userId",
        }
    ),
}
# Agents whose log bodies are free text with details (OpenCode: ``["evaluated", "{...pattern: 'echo ...'}"]``):
# only the message, the body's first string, is kept.
MESSAGE_ONLY_LOGS = frozenset({"opencode"})


def scrub_spans(request: ExportTraceServiceRequest, capture_content: bool, profile_name: str | None) -> int:
    """Remove content from every span (and span event) of ``request``, in place; how many values were removed."""
    if capture_content:
        return 0
    keys = AGENT_KEYS.get(profile_name or "", frozenset())
    removed = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                removed += _drop(span.attributes, keys)
                for event in span.events:
                    removed += _drop(event.attributes, keys)
    return removed


def scrub_logs(request: ExportLogsServiceRequest, capture_content: bool, profile_name: str | None) -> int:
    """Remove content from every log record of ``request``, in place; how many values were removed."""
    if capture_content:
        return 0
    keys = AGENT_KEYS.get(profile_name or "", frozenset())
    message_only = (profile_name or "") in MESSAGE_ONLY_LOGS
    removed = 0
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                removed += _drop(record.attributes, keys)
                removed += _scrub_body(record, message_only)
    return removed


def _is_content(key: str, agent_keys: frozenset[str]) -> bool:
    return key in CONVENTION_KEYS or key.startswith(CONVENTION_PREFIXES) or key in agent_keys


def _drop(attributes: MutableSequence[KeyValue], agent_keys: frozenset[str]) -> int:
    doomed = [i for i, kv in enumerate(attributes) if _is_content(kv.key, agent_keys)]
    for index in reversed(doomed):
        del attributes[index]
    return len(doomed)


# The record's own event name (field 12, OTLP 1.5) is in opentelemetry-proto 1.35 and later. An older proto keeps
# it among the record's unknown fields, read from the wire below: an agent on a newer SDK names its message events
# there, and their bodies must go whatever the proxy's proto knows.
_EVENT_NAME_FIELD = 12
_PROTO_HAS_EVENT_NAME = "event_name" in LogRecord.DESCRIPTOR.fields_by_name
_UNREADABLE = "\x00unreadable"  # no agent writes it: said of a record whose name could not be read (body removed)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _wire_event_name(data: bytes) -> str:
    """Field 12 of a serialized log record (unknown fields included). Written here because protobuf's wire
    decoder is private; an encoding this cannot walk counts as a message event (its body is removed)."""
    pos = 0
    try:
        while pos < len(data):
            key, pos = _varint(data, pos)
            wire = key & 7
            if wire == 0:
                pos = _varint(data, pos)[1]
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                size, pos = _varint(data, pos)
                if key >> 3 == _EVENT_NAME_FIELD:
                    return data[pos : pos + size].decode("utf-8", "replace")
                pos += size
            else:  # groups: not in OTLP
                return _UNREADABLE
    except IndexError:
        return _UNREADABLE
    return "" if pos == len(data) else _UNREADABLE  # past the end: a field cut short


def _event_name(record: LogRecord) -> str:
    if _PROTO_HAS_EVENT_NAME:
        name: str = record.event_name  # type: ignore[attr-defined,unused-ignore]
    else:
        name = _wire_event_name(record.SerializeToString())
    if name:
        return name
    for kv in record.attributes:
        if kv.key == EVENT_NAME:
            return kv.value.string_value
    return ""


def _scrub_body(record: LogRecord, message_only: bool) -> int:
    if not record.HasField("body"):
        return 0
    name = _event_name(record)
    if name in CONTENT_EVENTS or name == _UNREADABLE:
        record.ClearField("body")
        return 1
    if not message_only:
        return 0
    body = record.body
    if body.WhichOneof("value") in (None, "string_value"):  # nothing, or a message alone
        return 0
    values = body.array_value.values if body.HasField("array_value") else ()
    message = next((v.string_value for v in values if v.HasField("string_value")), "")
    if len(values) == 1 and message:
        return 0
    if message:
        record.body.CopyFrom(AnyValue(string_value=message))
    else:
        record.ClearField("body")
    return 1
