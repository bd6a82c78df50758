"""Configuration, read once from ``instrument()`` keyword arguments and ``OTEL_PYTHON_ACP_*`` variables.

Keyword arguments win over environment variables. An invalid value never raises: it logs a warning
and the default is used, because a typo in an environment variable must not stop an editor or agent.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._agent_profiles import BY_KEY, TITLE_PREFIX, TITLE_WHOLE, TRACE_KEY_PRESETS
from ._agent_profiles import USAGE_MODES as USAGE_REPORT_MODES
from ._semconv import EXTRA_TRACE_KEY_SOURCES, RESERVED_META_KEYS

_log = logging.getLogger("acp_otel")

ENV_EXCLUDED_METHODS = "OTEL_PYTHON_ACP_EXCLUDED_METHODS"
ENV_CAPTURE_CONTENT = "OTEL_PYTHON_ACP_CAPTURE_CONTENT"
ENV_CAPTURE_CONTENT_MAX_LENGTH = "OTEL_PYTHON_ACP_CAPTURE_CONTENT_MAX_LENGTH"
ENV_KEEP_SDK_SPANS = "OTEL_PYTHON_ACP_KEEP_SDK_SPANS"
ENV_NOTIFICATION_SPANS = "OTEL_PYTHON_ACP_NOTIFICATION_SPANS"
ENV_MAX_EVENTS_PER_SPAN = "OTEL_PYTHON_ACP_MAX_EVENTS_PER_SPAN"
ENV_PROPAGATE_ENV = "OTEL_PYTHON_ACP_PROPAGATE_ENV"
ENV_INJECT = "OTEL_PYTHON_ACP_INJECT"
ENV_INJECT_EXCLUDED_METHODS = "OTEL_PYTHON_ACP_INJECT_EXCLUDED_METHODS"
ENV_FLUSH_ON_EXIT = "OTEL_PYTHON_ACP_FLUSH_ON_EXIT"
ENV_TOOL_SPANS = "OTEL_PYTHON_ACP_TOOL_SPANS"
ENV_USAGE = "OTEL_PYTHON_ACP_USAGE"
# Tool names from titles (agents that name tools nowhere else) and extra trace-context keys (agents that read
# the context elsewhere than the reserved keys).
ENV_TOOL_NAMES_FROM_TITLES = "OTEL_PYTHON_ACP_TOOL_NAMES_FROM_TITLES"
ENV_EXTRA_TRACE_KEYS = "OTEL_PYTHON_ACP_EXTRA_TRACE_KEYS"
# The agent profile (see _agent_profiles) and per-field overrides of it.
ENV_AGENT_PROFILE = "OTEL_PYTHON_ACP_AGENT_PROFILE"
ENV_USAGE_REPORTS = "OTEL_PYTHON_ACP_USAGE_REPORTS"

# turn: session/update inside a turn has no span (counted / events on the turn or tool span);
# all: a span per notification; events: an event per session/update on the turn; none: no notification spans.
NOTIFICATION_SPAN_MODES = ("turn", "all", "none", "events")
# auto: the side closest to the tool makes tool spans; always / never override.
TOOL_SPAN_MODES = ("auto", "always", "never")
# auto: the side closest to the agent reports token usage, cost and context window; always / never override.
USAGE_MODES = ("auto", "always", "never")
# auto: the agent's profile says; off: never from titles; whole / prefix: the first title whole, or its identifier
# before a ':' (true means prefix, false off).
TITLE_NAME_MODES = ("auto", "off", TITLE_WHOLE, TITLE_PREFIX)

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class MethodMatcher:
    """Matches method names against comma-separated patterns with ``*`` / ``?`` wildcards.

    The engine asks once per method name and caches the answer, so no cache here.
    """

    __slots__ = ("_patterns",)

    def __init__(self, patterns: tuple[str, ...] = ()) -> None:
        self._patterns = patterns

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def __call__(self, method: str) -> bool:
        # fnmatchcase: method names are case sensitive; '[' in a name must not act as a set.
        return any(fnmatch.fnmatchcase(method, p.replace("[", "[[]")) for p in self._patterns)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MethodMatcher) and other._patterns == self._patterns

    def __hash__(self) -> int:
        return hash(self._patterns)

    def __repr__(self) -> str:
        return f"MethodMatcher({self._patterns!r})"


@dataclass(frozen=True)
class Settings:
    """Immutable instrumentation settings. Build with :func:`load_settings`."""

    excluded_methods: MethodMatcher = field(default_factory=MethodMatcher)
    capture_content: bool = False
    capture_content_max_length: int = 1024
    keep_sdk_spans: bool = False
    notification_spans: str = "turn"
    tool_spans: str = "auto"
    max_events_per_span: int = 128
    propagate_env: bool = True
    inject: bool = True
    inject_excluded_methods: MethodMatcher = field(default_factory=MethodMatcher)
    flush_on_exit: bool = True
    usage: str = "auto"
    # A tool call's name from its first title (when nothing better names it): auto (the agent profile's), off,
    # whole, prefix.
    tool_names_from_titles: str = "auto"
    # The agent profile: auto (identified per connection), none (the unknown agent's), or a profile's key.
    agent_profile: str = "auto"
    # What the agent's token usage reports mean: auto (the profile's), turn, running_total, last_call.
    usage_reports: str = "auto"
    # _meta keys written beside the reserved ones (expanded presets and literal keys; see _parse_trace_keys).
    extra_trace_keys: tuple[str, ...] = ()


def _parse_bool(name: str, value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return True
    if isinstance(value, str) and value.strip().lower() in _FALSE:
        return False
    _log.warning("acp_otel: invalid value %r for %s; using %r", value, name, default)
    return default


def _parse_int(name: str, value: Any, default: int, minimum: int) -> int:
    try:
        if isinstance(value, bool):
            raise ValueError
        parsed = int(str(value).strip()) if not isinstance(value, int) else value
    except (TypeError, ValueError):
        _log.warning("acp_otel: invalid value %r for %s; using %r", value, name, default)
        return default
    if parsed < minimum:
        _log.warning("acp_otel: %s must be >= %d, got %r; using %r", name, minimum, value, default)
        return default
    return parsed


def _parse_methods(name: str, value: Any) -> MethodMatcher:
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        _log.warning("acp_otel: invalid value %r for %s; using no methods", value, name)
        return MethodMatcher()
    patterns = tuple(sorted({item.strip() for item in items if item.strip()}))
    return MethodMatcher(patterns)


def _parse_choice(name: str, value: Any, default: str, choices: tuple[str, ...]) -> str:
    if isinstance(value, str) and value.strip().lower() in choices:
        return value.strip().lower()
    _log.warning("acp_otel: invalid value %r for %s (expected one of %s); using %r", value, name, choices, default)
    return default


def _parse_title_names(name: str, value: Any, default: str) -> str:
    """``tool_names_from_titles``: a boolean (true: ``prefix``, false: ``off``) or one of TITLE_NAME_MODES."""
    if isinstance(value, bool):
        return TITLE_PREFIX if value else "off"
    if isinstance(value, str):
        text = value.strip().lower()
        if text in TITLE_NAME_MODES:
            return text
        if text in _TRUE:
            return TITLE_PREFIX
        if text in _FALSE:
            return "off"
    _log.warning(
        "acp_otel: invalid value %r for %s (expected a boolean or one of %s); using %r",
        value,
        name,
        TITLE_NAME_MODES,
        default,
    )
    return default


def _parse_trace_keys(name: str, value: Any) -> tuple[str, ...]:
    """Extra trace-context keys: each entry a preset name (``qwen``) or a literal ``_meta`` key ending in
    ``traceparent`` or ``tracestate``; other entries are ignored with a warning. Order kept, duplicates and the
    reserved keys themselves (always written) dropped."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = list(value)
    else:
        _log.warning("acp_otel: invalid value %r for %s; using no extra trace keys", value, name)
        return ()
    keys: list[str] = []
    for item in items:
        entry = item.strip()
        if not entry:
            continue
        preset = TRACE_KEY_PRESETS.get(entry.lower())
        if preset is not None:
            found: tuple[str, ...] = preset
        elif entry.endswith(EXTRA_TRACE_KEY_SOURCES):
            found = (entry,)
        else:
            _log.warning(
                "acp_otel: %r in %s is neither a preset (%s) nor a key ending in traceparent or tracestate; ignored",
                entry,
                name,
                ", ".join(sorted(TRACE_KEY_PRESETS)),
            )
            continue
        keys.extend(k for k in found if k not in keys and k not in RESERVED_META_KEYS)
    return tuple(keys)


# option name -> (environment variable, parser)
_OPTIONS: dict[str, tuple[str, Any]] = {
    "excluded_methods": (ENV_EXCLUDED_METHODS, lambda n, v, d: _parse_methods(n, v)),
    "capture_content": (ENV_CAPTURE_CONTENT, _parse_bool),
    "capture_content_max_length": (
        ENV_CAPTURE_CONTENT_MAX_LENGTH,
        lambda n, v, d: _parse_int(n, v, d, minimum=1),
    ),
    "keep_sdk_spans": (ENV_KEEP_SDK_SPANS, _parse_bool),
    "notification_spans": (
        ENV_NOTIFICATION_SPANS,
        lambda n, v, d: _parse_choice(n, v, d, NOTIFICATION_SPAN_MODES),
    ),
    "tool_spans": (ENV_TOOL_SPANS, lambda n, v, d: _parse_choice(n, v, d, TOOL_SPAN_MODES)),
    "max_events_per_span": (ENV_MAX_EVENTS_PER_SPAN, lambda n, v, d: _parse_int(n, v, d, minimum=1)),
    "propagate_env": (ENV_PROPAGATE_ENV, _parse_bool),
    "inject": (ENV_INJECT, _parse_bool),
    "inject_excluded_methods": (ENV_INJECT_EXCLUDED_METHODS, lambda n, v, d: _parse_methods(n, v)),
    "flush_on_exit": (ENV_FLUSH_ON_EXIT, _parse_bool),
    "usage": (ENV_USAGE, lambda n, v, d: _parse_choice(n, v, d, USAGE_MODES)),
    "tool_names_from_titles": (ENV_TOOL_NAMES_FROM_TITLES, _parse_title_names),
    "agent_profile": (ENV_AGENT_PROFILE, lambda n, v, d: _parse_choice(n, v, d, ("auto", *BY_KEY))),
    "usage_reports": (ENV_USAGE_REPORTS, lambda n, v, d: _parse_choice(n, v, d, ("auto", *USAGE_REPORT_MODES))),
    "extra_trace_keys": (ENV_EXTRA_TRACE_KEYS, lambda n, v, d: _parse_trace_keys(n, v)),
}


def load_settings(options: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from keyword options (first) and environment variables (second).

    Unknown option names are ignored with a warning; invalid values fall back to the default.
    """
    options = dict(options or {})
    environ = os.environ if environ is None else environ
    defaults = Settings()
    values: dict[str, Any] = {}
    for key in list(options):
        if key not in _OPTIONS:
            _log.warning("acp_otel: unknown option %r ignored", key)
            options.pop(key)
    for key, (env_name, parse) in _OPTIONS.items():
        default = getattr(defaults, key)
        if key in options and options[key] is not None:
            values[key] = parse(key, options[key], default)
        elif env_name in environ and environ[env_name].strip() != "":
            values[key] = parse(env_name, environ[env_name], default)
    return Settings(**values)
