"""What acp-otel knows of the ACP agents this project has run: one :class:`AgentProfile` per agent, as data.

A connection's profile is looked up once, from the agent's ``agentInfo.name`` in the ``initialize`` answer, else
from the agent's command (the proxy knows it): :func:`resolve`. The engine then asks the profile where a tool
call's name is and what the agent's token usage means, instead of special-casing agents in its rules. An agent
that matches no profile gets :data:`UNKNOWN`: today's safe defaults (names only from ACP ``name`` and the known
``_meta`` keys, never from titles; usage taken as the turn's). Settings override a profile per field.

The profiles describe the versions in :attr:`AgentProfile.verified`; ``docs/agents.md`` lists them (a test
checks that table against this module).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ._agent_span_maps import SPAN_MAPS, SpanMap
from ._agent_switches import ALIASES, CONTENT_SWITCHES, PARENT_META_KEYS, SWITCHES, normalized

# Where a tool call's name is when ACP's own ``name`` is absent: the first title taken whole when it is a plain
# identifier (``read``), or the identifier it starts with, alone or before a ``:`` (``ReadFile: notes.txt``).
TITLE_WHOLE = "whole"
TITLE_PREFIX = "prefix"
TITLE_MODES = (TITLE_WHOLE, TITLE_PREFIX)

# What a token usage report means (and the value of ``acp.usage.source``): the turn's (ACP's
# ``PromptResponse.usage`` as documented); the session's running total (the turn's is the change since the
# previous turn's report); the turn's last model call only (not the turn's: kept apart); read from the agent's own
# ``_meta`` of the prompt's result (a per-turn figure, when ACP's ``usage`` is absent).
USAGE_TURN = "turn"
USAGE_RUNNING_TOTAL = "running_total"
USAGE_LAST_CALL = "last_call"
USAGE_AGENT_META = "agent_meta"
USAGE_MODES = (USAGE_TURN, USAGE_RUNNING_TOTAL, USAGE_LAST_CALL)  # what a setting may force

# Known ``_meta`` places of a tool call's programmatic name (paths into a tool call update's ``_meta``).
META_CLAUDE_CODE_TOOL_NAME = ("claudeCode", "toolName")
META_TOOL_NAME = ("toolName",)


QWEN_TRACE_KEYS = PARENT_META_KEYS["qwen-code"]


@dataclass(frozen=True)
class AgentTelemetry:
    """An agent's own OpenTelemetry: how ``acp-otel proxy --agent-telemetry`` switches it on, and what its spans
    say (docs/agent-telemetry.md has the table). Names are from each agent's source at the profile's version."""

    # Variables that switch its export on, to the proxy's receiver, and its content switches
    # (:mod:`acp_otel._agent_switches`, which the proxy reads before it starts the agent).
    switches: tuple[tuple[str, str], ...] = ()
    content_switches: tuple[tuple[str, str, str], ...] = ()
    # Span attribute keys that hold the ACP session id / the ACP tool call id in its own spans, tried in order.
    session_id_keys: tuple[str, ...] = ()
    tool_call_id_keys: tuple[str, ...] = ()
    # Whether its own spans report its tool calls (a span per call carrying a tool call id key) / token usage
    # (``gen_ai.usage.*`` on its model-call spans).
    reports_tool_calls: bool = False
    reports_usage: bool = False
    # ``_meta`` keys of ``session/prompt`` it takes a trace parent from (it continues the caller's trace itself).
    parent_meta_keys: tuple[str, ...] = ()
    # What the proxy adds to its spans for the GenAI conventions (:mod:`acp_otel._agent_span_maps`).
    span_maps: tuple[SpanMap, ...] = ()
    seen: bool = False  # run here against a sink (True), or read in its source only
    # For the docs' table (for people): what it emits, what content it can carry.
    emits: str = ""
    content: str = ""


NO_TELEMETRY = AgentTelemetry()


@dataclass(frozen=True)
class AgentProfile:
    """What one agent sends and how acp-otel reads it (data; see the module's docstring)."""

    key: str  # the profile's name in settings (``OTEL_PYTHON_ACP_AGENT_PROFILE``)
    title: str  # for people
    # ``agentInfo.name`` spellings and command names (as ``service.name`` derives them), compared normalized.
    aliases: tuple[str, ...] = ()
    verified: str = ""  # the package and version this was seen with
    # Paths into a tool call update's ``_meta`` that hold its programmatic name, tried in order after ACP ``name``.
    tool_name_meta: tuple[tuple[str, ...], ...] = ()
    tool_name_titles: str | None = None  # TITLE_WHOLE / TITLE_PREFIX: names from the first title; None: never
    usage: str = USAGE_TURN  # what the token counts of a prompt's result mean (USAGE_*)
    # Where the agent's own ``_meta`` of a prompt's result holds per-turn token counts: a path to a dict, and its
    # keys for input and output tokens (read only when ACP's ``usage`` is absent).
    usage_meta: tuple[str, ...] = ()
    usage_meta_keys: tuple[str, str] = ("input_tokens", "output_tokens")
    trace_keys: tuple[str, ...] = ()  # ``_meta`` keys of ``session/prompt`` it reads a trace parent from
    telemetry: str = ""  # how its own OpenTelemetry is switched on (for people)
    # What it sends, for the docs' table (for people).
    sends_tool_name: str = ""
    sends_usage: str = ""
    own_telemetry: AgentTelemetry = NO_TELEMETRY  # its own OpenTelemetry (``--agent-telemetry``)


UNKNOWN = AgentProfile(
    key="none",
    title="any other agent",
    tool_name_meta=(META_CLAUDE_CODE_TOOL_NAME, META_TOOL_NAME),
    sends_tool_name="ACP `name`, else `_meta.claudeCode.toolName` / `_meta.toolName`, else nothing",
    sends_usage="`PromptResponse.usage`, taken as the turn's",
)

PROFILES: tuple[AgentProfile, ...] = (
    AgentProfile(
        key="claude-code",
        title="Claude Code's ACP adapter",
        aliases=ALIASES["claude-code"],
        verified="npm `@zed-industries/claude-agent-acp` 0.23.1",
        tool_name_meta=(META_CLAUDE_CODE_TOOL_NAME,),
        telemetry="`CLAUDE_CODE_ENABLE_TELEMETRY=1` and `OTEL_*`; reads `TRACEPARENT` from its environment in SDK mode",
        sends_tool_name="`_meta.claudeCode.toolName` on a later update (`Read`, `Write`, `Bash`)",
        sends_usage="`PromptResponse.usage`, per turn",
        own_telemetry=AgentTelemetry(
            switches=SWITCHES["claude-code"],
            content_switches=CONTENT_SWITCHES["claude-code"],
            span_maps=SPAN_MAPS["claude-code"],
            session_id_keys=("session.id",),
            seen=True,
            emits="spans `claude_code.llm_request` per model call, `claude_code.tool` with `.blocked_on_user` and "
            "`.execution` per tool call (behind its enhanced-telemetry switch; their parent "
            "`claude_code.interaction` never ends in ACP mode); log events (`user_prompt`, `api_request` with tokens "
            "and cost per model call, `tool_decision`, `tool_result`); metrics",
            content="prompts (`user_prompt`, else `<REDACTED>`), tool parameters and contents: each behind its "
            "own switch, off by default",
        ),
    ),
    AgentProfile(
        key="codex",
        title="Codex's ACP adapter",
        aliases=ALIASES["codex"],
        verified="npm `@zed-industries/codex-acp` 0.16.0",
        telemetry="none over OTLP seen",
        sends_tool_name="none (kind `read`, `execute`)",
        sends_usage="none",
    ),
    AgentProfile(
        key="kimi-cli",
        title="Kimi Code CLI",
        aliases=ALIASES["kimi-cli"],
        verified="PyPI `kimi-cli` 1.52.0",
        tool_name_titles=TITLE_PREFIX,
        telemetry="`telemetry` in its `config.toml` (none over OTLP); in-process with `opentelemetry-instrument`",
        sends_tool_name="the first title (`ReadFile`); no kind",
        sends_usage="none",
    ),
    AgentProfile(
        key="qwen-code",
        title="Qwen Code",
        aliases=ALIASES["qwen-code"],
        verified="npm `@qwen-code/qwen-code` 0.24.4",
        tool_name_meta=(META_TOOL_NAME,),
        trace_keys=QWEN_TRACE_KEYS,
        telemetry="settings `telemetry.enabled`, `target: local`, `otlpEndpoint` (or `QWEN_TELEMETRY_*`)",
        sends_tool_name="`_meta.toolName` (`read_file`, `run_shell_command`)",
        sends_usage="none in the result (per model call in chunks' `_meta.usage`)",
        own_telemetry=AgentTelemetry(
            switches=SWITCHES["qwen-code"],
            content_switches=CONTENT_SWITCHES["qwen-code"],
            session_id_keys=("session.id", "gen_ai.conversation.id"),
            tool_call_id_keys=("gen_ai.tool.call.id", "tool.call_id", "call_id"),
            reports_tool_calls=True,
            reports_usage=True,
            parent_meta_keys=QWEN_TRACE_KEYS,
            seen=True,
            emits="spans `qwen-code.interaction` (`invoke_agent`), `qwen-code.llm_request` (`chat`, tokens), "
            "`qwen-code.tool` (`execute_tool`), `qwen-code.tool.execution`, HTTP client spans; log events; metrics",
            content="tool arguments (`function_args` of `qwen-code.tool_call`) and sub-agent answers (`result` of "
            "`qwen-code.subagent_execution`) whatever its switches say; prompts and responses with "
            "`QWEN_TELEMETRY_LOG_PROMPTS`",
        ),
    ),
    AgentProfile(
        key="gemini-cli",
        title="Gemini CLI",
        aliases=ALIASES["gemini-cli"],
        verified="npm `@google/gemini-cli` 0.61.0",
        usage=USAGE_AGENT_META,
        usage_meta=("quota", "token_count"),
        telemetry="`GEMINI_TELEMETRY_ENABLED`, `_TARGET=local`, `_OTLP_ENDPOINT` (logs prompts unless "
        "`GEMINI_TELEMETRY_LOG_PROMPTS=false`)",
        sends_tool_name="none (kind only)",
        sends_usage="`_meta.quota.token_count` of the result (`input_tokens`, `output_tokens`)",
        own_telemetry=AgentTelemetry(
            switches=SWITCHES["gemini-cli"],
            content_switches=CONTENT_SWITCHES["gemini-cli"],
            session_id_keys=("gen_ai.conversation.id", "session.id"),
            reports_usage=True,
            span_maps=SPAN_MAPS["gemini-cli"],
            seen=True,
            emits="spans `llm_call` (tokens); log events (`gemini_cli.*`, "
            "`gen_ai.client.inference.operation.details`); metrics",
            content="its system instructions on every model-call span and detail event; prompts, responses and "
            "tool arguments unless `GEMINI_TELEMETRY_LOG_PROMPTS=false`",
        ),
    ),
    AgentProfile(
        key="opencode",
        title="OpenCode",
        aliases=ALIASES["opencode"],
        verified="npm `opencode-ai` 1.18.33",
        tool_name_titles=TITLE_WHOLE,
        usage=USAGE_LAST_CALL,
        telemetry="exports to `OTEL_EXPORTER_OTLP_ENDPOINT` when set",
        sends_tool_name="the first title, the bare tool name (`read`, `write`, `bash`)",
        sends_usage="`PromptResponse.usage` of the turn's last model call only",
        own_telemetry=AgentTelemetry(
            session_id_keys=("session.id",),
            tool_call_id_keys=("tool.call_id",),
            reports_tool_calls=True,
            span_maps=SPAN_MAPS["opencode"],
            seen=True,
            emits="about a thousand spans a turn (`Tool.execute` per tool call, `LLM.run` per model call "
            "without attributes, the AI SDK's `ai.streamText.doStream` per model call with tokens, SQL, HTTP, "
            "plugins), one trace per process whose root it never exports; INFO log lines",
            content="file paths and shell commands in its INFO log lines; the AI SDK's prompt, response and tool "
            "calls on its spans",
        ),
    ),
    AgentProfile(
        key="copilot-cli",
        title="GitHub Copilot CLI",
        aliases=ALIASES["copilot-cli"],
        verified="npm `@github/copilot` 1.0.102",
        usage=USAGE_RUNNING_TOTAL,
        telemetry="GenAI spans only outside ACP mode",
        sends_tool_name="none (kind only)",
        sends_usage="`PromptResponse.usage`, the session's running total",
    ),
    AgentProfile(
        key="cline",
        title="Cline",
        aliases=ALIASES["cline"],
        verified="npm `cline` 3.0.65",
        tool_name_titles=TITLE_PREFIX,
        telemetry="none that an environment can point elsewhere (an organisation's remote configuration)",
        sends_tool_name="the identifier before the `:` of the first title",
        sends_usage="`PromptResponse.usage`, taken as the turn's",
        own_telemetry=AgentTelemetry(
            switches=SWITCHES["cline"],
            seen=True,
            emits="nothing to a receiver: its CLI binary ignores the environment's OpenTelemetry settings",
        ),
    ),
    AgentProfile(
        key="fast-agent",
        title="fast-agent",
        aliases=ALIASES["fast-agent"],
        verified="PyPI `fast-agent-mcp` 0.10.48",
        tool_name_titles=TITLE_WHOLE,
        telemetry="`otel: {enabled, otlp_endpoint}` in its config; in-process with `opentelemetry-instrument`",
        sends_tool_name="the first title, the bare tool name",
        sends_usage="a status text in its own `_meta` (free text: not read)",
        own_telemetry=AgentTelemetry(
            # Its settings from the environment: SECTION__FIELD; the endpoint is the traces URL itself.
            switches=SWITCHES["fast-agent"],
            seen=True,
            emits="spans of its ACP requests (`acp.request`), its agent's turns and its model calls (`openai.chat`)",
        ),
    ),
    AgentProfile(
        key="agentao",
        title="agentao",
        aliases=ALIASES["agentao"],
        verified="PyPI `agentao` 0.5.17",
        tool_name_titles=TITLE_WHOLE,
        telemetry="none over OTLP seen",
        sends_tool_name="the first title, the bare tool name",
        sends_usage="`PromptResponse.usage`, taken as the turn's",
    ),
    AgentProfile(
        key="pi-acp",
        title="pi-acp (pi coding agent)",
        aliases=ALIASES["pi-acp"],
        verified="npm `pi-acp` 0.0.34 with `@earendil-works/pi-coding-agent` 1.6.0",
        telemetry="none over OTLP seen",
        sends_tool_name="none (kind only)",
        sends_usage="`PromptResponse.usage`, taken as the turn's",
    ),
)

BY_KEY: dict[str, AgentProfile] = {p.key: p for p in (*PROFILES, UNKNOWN)}


_BY_ALIAS: dict[str, AgentProfile] = {normalized(a): p for p in PROFILES for a in (p.key, *p.aliases)}

# Presets of the extra_trace_keys setting: the keys the agents that read a trace parent from keys of their own use.
TRACE_KEY_PRESETS: dict[str, tuple[str, ...]] = {
    **{p.key: p.trace_keys for p in PROFILES if p.trace_keys},
    "qwen": BY_KEY["qwen-code"].trace_keys,
}


def identify(agent_name: Any) -> AgentProfile | None:
    """The profile an ``agentInfo.name`` (or a command's derived name) names, if any."""
    if type(agent_name) is not str or not agent_name:
        return None
    return _BY_ALIAS.get(normalized(agent_name[:256]))


def telemetry_of(profile: AgentProfile | str | None) -> AgentTelemetry:
    """What an agent's own OpenTelemetry is (a profile, or a profile's key): :data:`NO_TELEMETRY` when unknown."""
    if isinstance(profile, str):
        profile = BY_KEY.get(profile)
    return profile.own_telemetry if profile is not None else NO_TELEMETRY


def resolve(
    agent_name: Any,
    command: str | None,
    *,
    forced: str = "auto",
    titles: str = "auto",
    usage: str = "auto",
) -> AgentProfile:
    """A connection's profile: the one ``agentInfo.name`` names, else the one its command names, else
    :data:`UNKNOWN`; ``forced`` (a profile key, not ``auto``) instead of both. ``titles`` (``off`` or a
    ``TITLE_*``) and ``usage`` (a ``USAGE_MODES`` value) override those fields unless ``auto``."""
    profile = BY_KEY.get(forced) if forced != "auto" else None
    if profile is None:
        profile = identify(agent_name) or identify(command) or UNKNOWN
    changes: dict[str, Any] = {}
    if titles != "auto":
        changes["tool_name_titles"] = titles if titles in TITLE_MODES else None
    if usage != "auto":
        changes["usage"] = usage
    return dataclasses.replace(profile, **changes) if changes else profile
