"""Span names and attribute names: the one place that spells them.

ACP has no OpenTelemetry semantic conventions of its own yet. Names follow the RPC / JSON-RPC
conventions (``rpc.*``, ``jsonrpc.*``, ``error.type``) and mirror the MCP ones (``mcp.*`` ->
``acp.*``); ``gen_ai.conversation.id`` repeats the session id so GenAI-aware backends group turns.
"""

from __future__ import annotations

RPC_SYSTEM_NAME = "rpc.system.name"
RPC_SYSTEM_VALUE = "jsonrpc"
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
ERROR_TYPE = "error.type"

ACP_METHOD_NAME = "acp.method.name"
ACP_SESSION_ID = "acp.session.id"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
ACP_EXTENSION = "acp.extension"
ACP_EXTENSION_NAMESPACE = "acp.extension.namespace"
ACP_CANCELLED = "acp.cancelled"

ACP_PROTOCOL_VERSION = "acp.protocol.version"
ACP_AGENT_NAME = "acp.agent.name"
ACP_AGENT_VERSION = "acp.agent.version"
ACP_CLIENT_NAME = "acp.client.name"
ACP_CLIENT_VERSION = "acp.client.version"
ACP_CLIENT_CAPABILITIES_EXTENSIONS = "acp.client.capabilities.extensions"
ACP_AGENT_CAPABILITIES_EXTENSIONS = "acp.agent.capabilities.extensions"

ACP_STOP_REASON = "acp.stop_reason"
ACP_SESSION_UPDATE = "acp.session.update"
ACP_TOOL_CALL_ID = "acp.tool_call.id"
ACP_TOOL_CALL_STATUS = "acp.tool_call.status"

# Content: recorded only when capture_content is on.
ACP_PARAMS = "acp.params"
ACP_RESULT = "acp.result"
ACP_ERROR_DATA = "acp.error.data"
ACP_ERROR_DETAIL = "acp.error.detail"

# ``notification_spans=events``: one event per session/update on the in-flight prompt span.
SESSION_UPDATE_EVENT = "acp.session.update"
ACP_SESSION_UPDATE_COUNT = "acp.session.update.count"
ACP_SESSION_UPDATE_DROPPED = "acp.session.update.dropped"

# The root keys of ``_meta`` that W3C trace context owns in ACP.
RESERVED_META_KEYS = ("traceparent", "tracestate", "baggage")

# Spawning a stdio peer through the SDK (acp_otel.spawn): an INTERNAL span, process.* conventions.
SPAWN_SPAN_NAME = "acp.spawn"
PROCESS_EXECUTABLE_NAME = "process.executable.name"
PROCESS_PID = "process.pid"
PROCESS_COMMAND_ARGS = "process.command_args"  # only when content capture is on

INITIALIZE = "initialize"
SESSION_PROMPT = "session/prompt"
SESSION_UPDATE = "session/update"


def span_name(method: str) -> str:
    """The span name of a message: its method, as the JSON-RPC conventions ask."""
    return method


def is_extension(method: str) -> bool:
    """ACP extension methods and notifications start with ``_``."""
    return method.startswith("_")


def is_protocol_method(method: str) -> bool:
    """JSON-RPC protocol methods such as ``$/cancel_request`` keep their exact wire form."""
    return method.startswith("$/")


def extension_namespace(method: str) -> str | None:
    """``_zed.dev/workspace/buffers`` -> ``zed.dev``; ``None`` when the name has no ``/``."""
    name = method[1:]
    head, sep, _ = name.partition("/")
    return head if sep and head else None
