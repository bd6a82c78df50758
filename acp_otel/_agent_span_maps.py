"""What ``acp-otel proxy --agent-telemetry`` adds to each known agent's own spans so that they say what the
OpenTelemetry GenAI conventions need (data only; :mod:`acp_otel._proxy.span_mapping` applies it).

A :class:`SpanMap` names one kind of span of the agent (by its name) and the facts the span already has that the
conventions name otherwise: a value to set (the agent's own value, when it had another, kept under
``acp.agent_span.<key without gen_ai.>``), a value added only where the span has none, the agent's own
attributes copied to the conventions' keys where those are absent, and the provider as the Vercel AI SDK names it
translated to the conventions' ``gen_ai.provider.name``. docs/agent-telemetry.md has the table.
"""

from __future__ import annotations

from dataclasses import dataclass

ORIGINAL_PREFIX = "acp.agent_span."
"""Where an agent's own value that the mapping changed is kept (``acp.agent_span.operation.name``)."""


@dataclass(frozen=True)
class SpanMap:
    """The mapping of one kind of the agent's spans (see the module's docstring)."""

    name: str  # the span's name, as the agent sends it
    set: tuple[tuple[str, str], ...] = ()  # (key, value): the value the span gets (its own, if other, kept)
    default: tuple[tuple[str, str], ...] = ()  # (key, value): added where the span has no value
    copy: tuple[tuple[str, str], ...] = ()  # (key, the agent's key): its value copied where ``key`` is absent
    count: tuple[tuple[str, str], ...] = ()  # the same for counts (tokens): an integer value copied as an integer
    ai_sdk_provider: str | None = None  # the agent's key holding the AI SDK's provider: see ai_sdk_provider_name


# The Vercel AI SDK names a model's provider "<provider id>.<API>" ("openai.chat", "anthropic.messages",
# "google.vertex.chat"; "<name>.chat" for an OpenAI-compatible one the user named), its providers' own ids, which
# are not the conventions' gen_ai.provider.name values: the ids of its providers that the conventions know.
AI_SDK_PROVIDERS: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google": "gcp.gemini",  # google.generative-ai: the Gemini API
    "google.vertex": "gcp.vertex_ai",
    "azure": "azure.ai.openai",
    "azure-openai": "azure.ai.openai",
    "amazon-bedrock": "aws.bedrock",
    "mistral": "mistral_ai",
    "xai": "x_ai",
    "groq": "groq",
    "deepseek": "deepseek",
    "cohere": "cohere",
    "perplexity": "perplexity",
}


def ai_sdk_provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for the AI SDK's name of a provider: the conventions' value for a provider they know
    (its longest known id prefix), else the provider's id without the API (``local.chat``: ``local``), a custom
    value as the conventions allow."""
    parts = provider.split(".")
    for end in range(len(parts), 0, -1):
        known = AI_SDK_PROVIDERS.get(".".join(parts[:end]))
        if known is not None:
            return known
    return ".".join(parts[:-1]) if len(parts) > 1 and parts[0] else provider


def original_key(key: str) -> str:
    """Where the agent's own value of ``key`` is kept when the mapping changes it."""
    return ORIGINAL_PREFIX + key.removeprefix("gen_ai.")


SPAN_MAPS: dict[str, tuple[SpanMap, ...]] = {
    # Gemini CLI 0.61.0: ``llm_call`` carries gen_ai.operation.name=llm_call (no operation the conventions define),
    # the model and the tokens, no provider; it calls the Gemini API (generate_content is its operation).
    "gemini-cli": (
        SpanMap(
            "llm_call",
            set=(("gen_ai.operation.name", "generate_content"),),
            default=(("gen_ai.provider.name", "gcp.gemini"),),
        ),
    ),
    # Claude Code 2.1.83 (its ACP adapter 0.23.1): ``claude_code.llm_request`` carries the model and the tokens under
    # names of its own, no operation, no provider; it calls the Anthropic API. Its ``claude_code.tool`` spans carry
    # no tool call id: the proxy's execute_tool spans report its tool calls.
    "claude-code": (
        SpanMap(
            "claude_code.llm_request",
            set=(("gen_ai.operation.name", "chat"),),
            default=(("gen_ai.provider.name", "anthropic"),),
            copy=(("gen_ai.request.model", "model"),),
            count=(("gen_ai.usage.input_tokens", "input_tokens"), ("gen_ai.usage.output_tokens", "output_tokens")),
        ),
    ),
    # OpenCode 1.18.33: ``Tool.execute`` carries tool.name and tool.call_id (the ACP tool call id) and no GenAI
    # names. Its ``LLM.run`` spans carry no attribute at all and miss a model call of the turn: its model calls are
    # the AI SDK's provider-call spans (``experimental.openTelemetry``, switched on by the proxy), which carry the
    # model, the tokens and gen_ai.system (the provider as the AI SDK names it: ``openai.chat``, ``<id>.chat``, see
    # ai_sdk_provider_name), no operation. ``LLM.run``, ``ai.streamText`` and ``ai.toolCall`` (beside
    # ``Tool.execute``) stay unmapped.
    "opencode": (
        SpanMap(
            "Tool.execute",
            set=(("gen_ai.operation.name", "execute_tool"),),
            copy=(("gen_ai.tool.name", "tool.name"), ("gen_ai.tool.call.id", "tool.call_id")),
        ),
        SpanMap(
            "ai.streamText.doStream",
            set=(("gen_ai.operation.name", "chat"),),
            ai_sdk_provider="gen_ai.system",
        ),
        SpanMap(
            "ai.generateText.doGenerate",
            set=(("gen_ai.operation.name", "chat"),),
            ai_sdk_provider="gen_ai.system",
        ),
    ),
}
