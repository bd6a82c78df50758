"""Span, event, metric and attribute names: the one place that spells them.

ACP has no OpenTelemetry semantic conventions of its own yet. Names follow the RPC / JSON-RPC
conventions (``rpc.*``, ``jsonrpc.*``, ``error.type``; semantic conventions 1.44.0), mirror the MCP ones
(``mcp.*`` -> ``acp.*``) and use the GenAI agent / tool conventions (``gen_ai.*``, semantic-conventions-genai,
development status, schema ``gen-ai-dev/1.42.0-dev``) for turns and tool calls. ``gen_ai.*`` names are only
those the GenAI registry defines; what it does not define lives under ``acp.*``. Every name is checked
against the conventions' registries by ``tests/test_semconv_registry.py``.
"""

from __future__ import annotations

# The GenAI conventions' schema (their repository's manifest; it builds on the core conventions 1.44.0, whose
# rpc.*, jsonrpc.*, network.*, server.*, client.*, error.* and process.* names we use).
SCHEMA_URL = "https://opentelemetry.io/schemas/gen-ai-dev/1.42.0-dev"

RPC_SYSTEM_NAME = "rpc.system.name"
RPC_SYSTEM_VALUE = "jsonrpc"
# Renamed rpc.status_code on the core conventions' main branch after 1.44.0: switch when a release has it.
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
# Conditionally Required on JSON-RPC spans ("if other than the default version 1.0"): ACP is JSON-RPC 2.0.
JSONRPC_PROTOCOL_VERSION = "jsonrpc.protocol.version"
JSONRPC_VERSION = "2.0"
ERROR_TYPE = "error.type"

ACP_METHOD_NAME = "acp.method.name"
# The session id, on every span that knows it (message, turn and tool spans alike), as A2A puts the GenAI
# names on its protocol spans: one query finds a session's turns, tool calls and messages.
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
# A boolean; not "acp.extension", which is the namespace of acp.extension.namespace (a name must not be both).
ACP_EXTENSION = "acp.method.extension"
ACP_EXTENSION_NAMESPACE = "acp.extension.namespace"
ACP_CANCELLED = "acp.cancelled"

ACP_PROTOCOL_VERSION = "acp.protocol.version"
# The agent's agentInfo, on every span of its connection after initialize (the GenAI names, as A2A does).
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_VERSION = "gen_ai.agent.version"
ACP_CLIENT_NAME = "acp.client.name"
ACP_CLIENT_VERSION = "acp.client.version"
ACP_CLIENT_CAPABILITIES_EXTENSIONS = "acp.client.capabilities.extensions"
ACP_AGENT_CAPABILITIES_EXTENSIONS = "acp.agent.capabilities.extensions"

ACP_STOP_REASON = "acp.stop_reason"
# The kind of one session/update; not "acp.session.update", the namespace of the .count / .dropped below.
ACP_SESSION_UPDATE = "acp.session.update.kind"
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
ACP_SESSION_UPDATE_DROPPED = "acp.session.update.dropped.count"

# The root keys of ``_meta`` that W3C trace context owns in ACP.
RESERVED_META_KEYS = ("traceparent", "tracestate", "baggage")

# Spawning a stdio peer through the SDK (acp_otel._spawn): an INTERNAL span, process.* conventions.
SPAWN_SPAN_NAME = "acp.spawn"
PROCESS_EXECUTABLE_NAME = "process.executable.name"
PROCESS_PID = "process.pid"
PROCESS_COMMAND_ARGS = "process.command_args"  # only when content capture is on

INITIALIZE = "initialize"
SESSION_PROMPT = "session/prompt"
SESSION_UPDATE = "session/update"
SESSION_REQUEST_PERMISSION = "session/request_permission"

# --------------------------------------------------------------- agent level (turns, tool calls)

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"  # content: only with capture_content
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"  # content: only with capture_content
# The stop reason as a GenAI finish reason (a string array; the raw value stays in acp.stop_reason).
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
# semantic-conventions-genai renamed cache_creation to cache_write (2026, #440).
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
ACP_USAGE_TOTAL_TOKENS = "acp.usage.total_tokens"  # the GenAI registry has no total
# What the turn's token counts are (the agent profile's reading of its reports): turn, running_total, agent_meta;
# last_call: the counts are of the turn's last model call only, under LAST_CALL_ATTRIBUTES, not gen_ai.usage.*.
ACP_USAGE_SOURCE = "acp.usage.source"

# ACP usage field -> attribute (PromptResponse.usage / v2 idle state_update.usage).
USAGE_ATTRIBUTES = (
    ("inputTokens", GEN_AI_USAGE_INPUT_TOKENS),
    ("outputTokens", GEN_AI_USAGE_OUTPUT_TOKENS),
    ("cachedReadTokens", GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS),
    ("cachedWriteTokens", GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS),
    ("thoughtTokens", GEN_AI_USAGE_REASONING_OUTPUT_TOKENS),
    ("totalTokens", ACP_USAGE_TOTAL_TOKENS),
)
# The same counts when they are of the turn's last model call only (acp.usage.source = last_call): kept out of
# gen_ai.usage.*, which would pass them off as the turn's.
LAST_CALL_ATTRIBUTES = {
    GEN_AI_USAGE_INPUT_TOKENS: "acp.usage.last_call.input_tokens",
    GEN_AI_USAGE_OUTPUT_TOKENS: "acp.usage.last_call.output_tokens",
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: "acp.usage.last_call.cache_read.input_tokens",
    GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: "acp.usage.last_call.cache_write.input_tokens",
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: "acp.usage.last_call.reasoning.output_tokens",
    ACP_USAGE_TOTAL_TOKENS: "acp.usage.last_call.total_tokens",
}

# Turn span: streamed chunks per kind, all updates absorbed, why a turn span ended without its answer.
CHUNK_KINDS = ("agent_message_chunk", "agent_thought_chunk", "user_message_chunk")
AGENT_CHUNK_KINDS = frozenset(("agent_message_chunk", "agent_thought_chunk"))
# acp.turn.{kind}.count, e.g. acp.turn.agent_message_chunk.count (a count is a .count, not a _count).
ACP_TURN_CHUNK_COUNT = "acp.turn.{}.count"
# From the start of the turn to its first agent chunk (not gen_ai.response.time_to_first_chunk, which is one
# model call's, measured from the model request).
ACP_TURN_TIME_TO_FIRST_CHUNK = "acp.turn.time_to_first_chunk"
ACP_TURN_ENDED_BY = "acp.turn.ended_by"
ACP_TURN_SPAN_NAME = "invoke_agent"  # v2 turn span: "invoke_agent" or "invoke_agent {agent name}"
V2_STATE_UPDATE = "state_update"
ACP_TURN_STATE = "acp.turn.state"

# Tool call spans.
ACP_TOOL_CALL_KIND = "acp.tool_call.kind"
ACP_TOOL_CALL_TITLE = "acp.tool_call.title"  # content: only with capture_content
ACP_TOOL_CALL_LOCATIONS = "acp.tool_call.locations"  # content: only with capture_content
ACP_TOOL_CALL_ENDED_BY = "acp.tool_call.ended_by"
ACP_TOOL_CALL_UPDATE_COUNT = "acp.tool_call.update.count"
# Where gen_ai.tool.name came from: the agent's ``name`` / ``_meta`` (a declared name), a title, or the ACP kind
# (which stands in when nothing names the tool: a kind is not a name, and this says so).
ACP_TOOL_CALL_NAME_SOURCE = "acp.tool_call.name.source"
TOOL_STATUS_EVENT = "acp.tool_call.status"
# acp.tool_call.name.source values, by the rank of the source (_turn_state.NAME_ACP ... NAME_KIND).
TOOL_NAME_SOURCES = ("acp", "agent_meta", "title", "kind")
TOOL_STATUSES = frozenset(("pending", "in_progress", "completed", "failed"))
TOOL_KINDS = frozenset(
    ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other")
)
# ended_by values: the tool call / turn did not end by itself.
ENDED_BY_TURN = "turn_end"
ENDED_BY_CONNECTION = "connection_closed"
ENDED_BY_NEXT_PROMPT = "next_prompt"
ENDED_BY_SHUTDOWN = "uninstrumented"
TOOL_FAILED = "tool_error"  # error.type of a tool call whose status became failed (the MCP conventions' value)

OTHER = "_OTHER"  # bounded metric attribute values: everything outside the known set

# ------------------------------------------------------------------------------------- metrics

# Request durations mirror MCP's mcp.client/server.operation.duration (one per side);
# turn and tool durations are the GenAI agent / tool metrics.
METRIC_CLIENT_OPERATION_DURATION = "acp.client.operation.duration"
METRIC_SERVER_OPERATION_DURATION = "acp.server.operation.duration"
# Recorded by the side closest to the agent (the one that reports usage); the other sides record the GenAI
# client-side duration with gen_ai.operation.name = invoke_agent, so sums over turns count each turn once.
METRIC_INVOKE_AGENT_DURATION = "gen_ai.invoke_agent.duration"
METRIC_CLIENT_OPERATION_DURATION_GENAI = "gen_ai.client.operation.duration"
METRIC_EXECUTE_TOOL_DURATION = "gen_ai.execute_tool.duration"
METRIC_TIME_TO_FIRST_CHUNK = ACP_TURN_TIME_TO_FIRST_CHUNK

# ------------------------------------------------------- usage, cost, context window, content

# Token and cost counters of a turn. The GenAI conventions replaced the gen_ai.client.token.usage histogram
# with gen_ai.client.inference.* instruments, which describe one inference call (provider and model
# required); a turn is many such calls, reported by the agent as totals: ACP names of our own.
METRIC_TURN_INPUT_TOKENS = "acp.turn.usage.input_tokens"
METRIC_TURN_OUTPUT_TOKENS = "acp.turn.usage.output_tokens"
METRIC_TURN_COST = "acp.turn.usage.cost"
# From usage_update session updates: the context window (last seen in the turn), the turn's cost.
USAGE_UPDATE = "usage_update"
ACP_USAGE_CONTEXT_USED = "acp.usage.context.used"
ACP_USAGE_CONTEXT_SIZE = "acp.usage.context.size"
ACP_USAGE_COST_AMOUNT = "acp.usage.cost.amount"
ACP_USAGE_COST_CURRENCY = "acp.usage.cost.currency"
# Content of a turn (only with capture_content): the GenAI opt-in messages (JSON) and OpenInference's
# input/output values (plain text), which Phoenix and Langfuse show on an agent span.
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
INPUT_VALUE = "input.value"
INPUT_MIME_TYPE = "input.mime_type"
OUTPUT_VALUE = "output.value"
OUTPUT_MIME_TYPE = "output.mime_type"
TEXT_PLAIN = "text/plain"
# ACP stop reason -> GenAI finish reason (gen_ai.response.finish_reasons); others are kept as they are.
FINISH_REASONS = {"end_turn": "stop", "max_tokens": "length", "refusal": "content_filter"}

# Standard ACP methods (v1 and the v2 draft): kept as they are in metric attributes.
STANDARD_METHODS = frozenset(
    (
        "initialize",
        "authenticate",
        "session/new",
        "session/load",
        "session/list",
        "session/fork",
        "session/resume",
        "session/close",
        "session/delete",
        "session/prompt",
        "session/cancel",
        "session/update",
        "session/set_mode",
        "session/set_model",
        "session/set_config_option",
        "session/request_permission",
        "fs/read_text_file",
        "fs/write_text_file",
        "terminal/create",
        "terminal/output",
        "terminal/release",
        "terminal/wait_for_exit",
        "terminal/kill",
        "auth/login",
        "auth/logout",
        "providers/list",
        "providers/set",
        "providers/disable",
        "mcp/connect",
        "mcp/message",
        "mcp/disconnect",
        "elicitation/create",
        "elicitation/complete",
        "$/cancel_request",
    )
)


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


# --- remote transports (acp.http / acp.ws): the connection a span belongs to, and its peer ---------------
# The id the transport names the connection by (the Acp-Connection-Id header of Streamable HTTP and WebSocket).
ACP_CONNECTION_ID = "acp.connection.id"
# OpenTelemetry's general network attributes: the client records the server it reaches, the server the client.
NETWORK_TRANSPORT = "network.transport"  # "tcp" or "unix"
NETWORK_PROTOCOL_NAME = "network.protocol.name"  # "http" or "websocket"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
CLIENT_ADDRESS = "client.address"
CLIENT_PORT = "client.port"

# ---------------------------------------- tool call names, requests that serve a tool call, extra trace keys

# A tool call content item that embeds a terminal: {"type": "terminal", "terminalId": ...}.
TERMINAL_CONTENT_TYPE = "terminal"
# Agent -> client requests that do a tool call's work: children of the tool call they serve.
TOOL_SERVING_PREFIXES = ("fs/", "terminal/")
# Extra trace-context keys: the reserved key a literal key's value comes from (by its suffix); the presets are the
# agent profiles' (acp_otel._agent_profiles).
EXTRA_TRACE_KEY_SOURCES = ("traceparent", "tracestate")
