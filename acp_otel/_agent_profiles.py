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
import re
from dataclasses import dataclass
from typing import Any

from ._child_env import service_name_for_command

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
        aliases=("claude-agent-acp", "claude-code-acp", "claude-code"),
        verified="npm `@zed-industries/claude-agent-acp` 0.23.1",
        tool_name_meta=(META_CLAUDE_CODE_TOOL_NAME,),
        telemetry="`CLAUDE_CODE_ENABLE_TELEMETRY=1` and `OTEL_*`; reads `TRACEPARENT` from its environment in SDK mode",
        sends_tool_name="`_meta.claudeCode.toolName` on a later update (`Read`, `Write`, `Bash`)",
        sends_usage="`PromptResponse.usage`, per turn",
    ),
    AgentProfile(
        key="codex",
        title="Codex's ACP adapter",
        aliases=("codex-acp", "codex"),
        verified="npm `@zed-industries/codex-acp` 0.16.0",
        telemetry="none over OTLP seen",
        sends_tool_name="none (kind `read`, `execute`)",
        sends_usage="none",
    ),
    AgentProfile(
        key="kimi-cli",
        title="Kimi Code CLI",
        aliases=("kimi-code-cli", "kimi-cli", "kimi-code", "kimi"),
        verified="PyPI `kimi-cli` 1.52.0",
        tool_name_titles=TITLE_PREFIX,
        telemetry="`telemetry` in its `config.toml` (none over OTLP); in-process with `opentelemetry-instrument`",
        sends_tool_name="the first title (`ReadFile`); no kind",
        sends_usage="none",
    ),
    AgentProfile(
        key="qwen-code",
        title="Qwen Code",
        aliases=("qwen-code", "qwen"),
        verified="npm `@qwen-code/qwen-code` 0.24.4",
        tool_name_meta=(META_TOOL_NAME,),
        trace_keys=("qwen.telemetry.traceparent", "qwen.telemetry.tracestate"),
        telemetry="settings `telemetry.enabled`, `target: local`, `otlpEndpoint` (or `QWEN_TELEMETRY_*`)",
        sends_tool_name="`_meta.toolName` (`read_file`, `run_shell_command`)",
        sends_usage="none in the result (per model call in chunks' `_meta.usage`)",
    ),
    AgentProfile(
        key="gemini-cli",
        title="Gemini CLI",
        aliases=("gemini-cli", "gemini", "google-gemini-cli"),
        verified="npm `@google/gemini-cli` 0.61.0",
        usage=USAGE_AGENT_META,
        usage_meta=("quota", "token_count"),
        telemetry="`GEMINI_TELEMETRY_ENABLED`, `_TARGET=local`, `_OTLP_ENDPOINT` (logs prompts unless "
        "`GEMINI_TELEMETRY_LOG_PROMPTS=false`)",
        sends_tool_name="none (kind only)",
        sends_usage="`_meta.quota.token_count` of the result (`input_tokens`, `output_tokens`)",
    ),
    AgentProfile(
        key="opencode",
        title="OpenCode",
        aliases=("opencode", "opencode-ai"),
        verified="npm `opencode-ai` 1.18.33",
        tool_name_titles=TITLE_WHOLE,
        usage=USAGE_LAST_CALL,
        telemetry="exports to `OTEL_EXPORTER_OTLP_ENDPOINT` when set",
        sends_tool_name="the first title, the bare tool name (`read`, `write`, `bash`)",
        sends_usage="`PromptResponse.usage` of the turn's last model call only",
    ),
    AgentProfile(
        key="copilot-cli",
        title="GitHub Copilot CLI",
        aliases=("copilot", "copilot-cli", "github-copilot", "github-copilot-cli"),
        verified="npm `@github/copilot` 1.0.102",
        usage=USAGE_RUNNING_TOTAL,
        telemetry="GenAI spans only outside ACP mode",
        sends_tool_name="none (kind only)",
        sends_usage="`PromptResponse.usage`, the session's running total",
    ),
    AgentProfile(
        key="cline",
        title="Cline",
        aliases=("cline", "cline-cli"),
        verified="npm `cline` 3.0.65",
        tool_name_titles=TITLE_PREFIX,
        telemetry="`OTEL_TELEMETRY_ENABLED=1` and `OTEL_*`",
        sends_tool_name="the identifier before the `:` of the first title",
        sends_usage="`PromptResponse.usage`, taken as the turn's",
    ),
    AgentProfile(
        key="fast-agent",
        title="fast-agent",
        aliases=("fast-agent", "fast-agent-mcp", "fast-agent-acp"),
        verified="PyPI `fast-agent-mcp` 0.10.48",
        tool_name_titles=TITLE_WHOLE,
        telemetry="`otel: {enabled, otlp_endpoint}` in its config; in-process with `opentelemetry-instrument`",
        sends_tool_name="the first title, the bare tool name",
        sends_usage="a status text in its own `_meta` (free text: not read)",
    ),
    AgentProfile(
        key="agentao",
        title="agentao",
        aliases=("agentao",),
        verified="PyPI `agentao` 0.5.17",
        tool_name_titles=TITLE_WHOLE,
        telemetry="none over OTLP seen",
        sends_tool_name="the first title, the bare tool name",
        sends_usage="`PromptResponse.usage`, taken as the turn's",
    ),
    AgentProfile(
        key="pi-acp",
        title="pi-acp (pi coding agent)",
        aliases=("pi-acp", "pi-coding-agent"),
        verified="npm `pi-acp` 0.0.34 with `@earendil-works/pi-coding-agent` 1.6.0",
        telemetry="none over OTLP seen",
        sends_tool_name="none (kind only)",
        sends_usage="`PromptResponse.usage`, taken as the turn's",
    ),
)

BY_KEY: dict[str, AgentProfile] = {p.key: p for p in (*PROFILES, UNKNOWN)}


def _normalized(name: str) -> str:
    """``@zed-industries/claude-agent-acp`` -> ``claude-agent-acp``; ``Kimi Code CLI`` -> ``kimi-code-cli``."""
    return re.sub(r"[^a-z0-9]+", "-", name.rpartition("/")[2].lower()).strip("-")


_BY_ALIAS: dict[str, AgentProfile] = {_normalized(a): p for p in PROFILES for a in (p.key, *p.aliases)}

# Presets of the extra_trace_keys setting: the keys the agents that read a trace parent from keys of their own use.
TRACE_KEY_PRESETS: dict[str, tuple[str, ...]] = {
    **{p.key: p.trace_keys for p in PROFILES if p.trace_keys},
    "qwen": BY_KEY["qwen-code"].trace_keys,
}


def identify(agent_name: Any) -> AgentProfile | None:
    """The profile an ``agentInfo.name`` (or a command's derived name) names, if any."""
    if type(agent_name) is not str or not agent_name:
        return None
    return _BY_ALIAS.get(_normalized(agent_name[:256]))


def command_name(command: Any) -> str | None:
    """The name an agent command goes by (``npx -y @scope/pkg`` -> ``pkg``), as ``service.name`` derives it."""
    if not command or not all(type(part) is str for part in command):
        return None
    return service_name_for_command(command[0], command[1:])


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
