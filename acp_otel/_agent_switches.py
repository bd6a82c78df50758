"""What the proxy needs of the known agents before it starts one: their names, and the environment variables that
switch each agent's own telemetry on (``--agent-telemetry``). Data only, and cheap to import (``re``): the proxy
reads it before the agent is started; :mod:`acp_otel._agent_profiles` builds the profiles from it.
"""

from __future__ import annotations

import json
import re

# The value of a telemetry switch that stands for the proxy's receiver (``http://127.0.0.1:<port>``).
ENDPOINT = "{endpoint}"

# Per profile key: the ``agentInfo.name`` spellings and command names it goes by (compared normalized).
ALIASES: dict[str, tuple[str, ...]] = {
    "claude-code": ("claude-agent-acp", "claude-code-acp", "claude-code"),
    "codex": ("codex-acp", "codex"),
    "kimi-cli": ("kimi-code-cli", "kimi-cli", "kimi-code", "kimi"),
    "qwen-code": ("qwen-code", "qwen"),
    "gemini-cli": ("gemini-cli", "gemini", "google-gemini-cli"),
    "opencode": ("opencode", "opencode-ai"),
    "copilot-cli": ("copilot", "copilot-cli", "github-copilot", "github-copilot-cli"),
    "cline": ("cline", "cline-cli"),
    "fast-agent": ("fast-agent", "fast-agent-mcp", "fast-agent-acp"),
    "agentao": ("agentao",),
    "pi-acp": ("pi-acp", "pi-coding-agent"),
}

# Per profile key: the ``_meta`` keys the agent reads a trace parent from, besides the reserved ones (the proxy
# writes them with ``--agent-telemetry``; its standard-library relay of the first lines needs them before the
# profiles are imported).
PARENT_META_KEYS: dict[str, tuple[str, ...]] = {
    "qwen-code": ("qwen.telemetry.traceparent", "qwen.telemetry.tracestate"),
}

# Per profile key: the variables that switch its own export on, to the receiver (:data:`ENDPOINT` in a value
# stands for it), set beside the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``_PROTOCOL`` / ``OTEL_SERVICE_NAME``.
# Names from each agent's source at its profile's version (docs/agent-telemetry.md).
SWITCHES: dict[str, tuple[tuple[str, str], ...]] = {
    "claude-code": (
        ("CLAUDE_CODE_ENABLE_TELEMETRY", "1"),
        ("CLAUDE_CODE_ENHANCED_TELEMETRY_BETA", "1"),  # its spans (metrics and log events without it)
        ("OTEL_TRACES_EXPORTER", "otlp"),
        ("OTEL_METRICS_EXPORTER", "otlp"),
        ("OTEL_LOGS_EXPORTER", "otlp"),
        # Its batches go out every 5 s (metrics 60 s) and at exit; its ACP adapter does not exit when the editor
        # closes its stdin, and the editor's SIGTERM ends it before that last export: sent while the turn runs.
        ("OTEL_TRACES_EXPORT_INTERVAL", "1000"),
        ("OTEL_LOGS_EXPORT_INTERVAL", "1000"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
    ),
    "qwen-code": (
        ("QWEN_TELEMETRY_ENABLED", "true"),
        ("QWEN_TELEMETRY_TARGET", "local"),
        ("QWEN_TELEMETRY_OTLP_ENDPOINT", ENDPOINT),
        ("QWEN_TELEMETRY_OTLP_PROTOCOL", "http"),
    ),
    "gemini-cli": (
        ("GEMINI_TELEMETRY_ENABLED", "true"),
        ("GEMINI_TELEMETRY_TARGET", "local"),
        ("GEMINI_TELEMETRY_OTLP_ENDPOINT", ENDPOINT),
        ("GEMINI_TELEMETRY_OTLP_PROTOCOL", "http"),
        ("GEMINI_TELEMETRY_TRACES_ENABLED", "true"),  # the model-call spans' attributes (tokens)
    ),
    # None: its npm library reads OTEL_TELEMETRY_ENABLED and the standard variables, but its CLI binary (3.0.65) is
    # built with that reader replaced by a fixed configuration; its OTLP settings come only from an organisation's
    # remote configuration (docs/agent-telemetry.md).
    "cline": (),
    # It ends without exporting its last batch when the editor closes its stdin (the turn's last model call, with
    # the default 5 s delay): sent while the turn runs, every 200 ms (at 1 s a loaded machine still lost the
    # turn's last spans).
    "opencode": (("OTEL_BSP_SCHEDULE_DELAY", "200"),),
    # Its settings from the environment: SECTION__FIELD; the endpoint is the traces URL itself.
    "fast-agent": (("OTEL__ENABLED", "true"), ("OTEL__OTLP_ENDPOINT", ENDPOINT + "/v1/traces")),
}

# Per profile key: its content switches, (variable, value when the proxy captures content, value when it does not).
CONTENT_SWITCHES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "claude-code": (
        ("OTEL_LOG_USER_PROMPTS", "1", "0"),
        ("OTEL_LOG_TOOL_DETAILS", "1", "0"),
        ("OTEL_LOG_TOOL_CONTENT", "1", "0"),
    ),
    "qwen-code": (
        ("QWEN_TELEMETRY_LOG_PROMPTS", "true", "false"),
        ("QWEN_TELEMETRY_INCLUDE_SENSITIVE_SPAN_ATTRIBUTES", "true", "false"),
    ),
    "gemini-cli": (("GEMINI_TELEMETRY_LOG_PROMPTS", "true", "false"),),  # its default is true
}

# Per profile key: variables holding a JSON configuration the agent reads (a JSON object), and what the proxy merges
# into it: into the value the agent's environment already has (a user's own), key by key, the proxy's values
# winning; a value that is not a JSON object is left alone. OpenCode reads ``OPENCODE_CONFIG_CONTENT`` as a config
# layer; ``experimental.openTelemetry`` turns on the AI SDK's spans of its model calls (their tokens).
CONFIG_SWITCHES: dict[str, tuple[tuple[str, dict[str, object]], ...]] = {
    "opencode": (("OPENCODE_CONFIG_CONTENT", {"experimental": {"openTelemetry": True}}),),
}


def merged_config(own: str | None, switch: dict[str, object]) -> str | None:
    """``switch`` merged into the JSON object ``own`` (none: ``switch`` alone); None when ``own`` is not one."""
    if own is None or not own.strip():
        return json.dumps(switch)
    try:
        config = json.loads(own)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    return json.dumps(_merge(config, switch))


def _merge(into: dict[str, object], values: dict[str, object]) -> dict[str, object]:
    out = dict(into)
    for key, value in values.items():
        mine = out.get(key)
        out[key] = _merge(mine, value) if isinstance(mine, dict) and isinstance(value, dict) else value
    return out


def normalized(name: str) -> str:
    """``@zed-industries/claude-agent-acp`` -> ``claude-agent-acp``; ``Kimi Code CLI`` -> ``kimi-code-cli``."""
    return re.sub(r"[^a-z0-9]+", "-", name.rpartition("/")[2].lower()).strip("-")


_KEY_BY_ALIAS: dict[str, str] = {normalized(a): key for key, aliases in ALIASES.items() for a in (key, *aliases)}


def key_of(name: object) -> str | None:
    """The profile key an ``agentInfo.name`` or a command's name names, if any."""
    if type(name) is not str or not name:
        return None
    return _KEY_BY_ALIAS.get(normalized(name[:256]))
