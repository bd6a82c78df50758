"""Command-line options of ``acp-otel proxy`` (imported on every start, before the agent is started).

``acp-otel proxy -- CMD [ARGS...]``, the editor's usual command line, has no option to parse: :func:`plain_command`
reads it without argparse (building the parser takes a few milliseconds of CPU before the agent can start);
anything else is parsed by the parser :func:`add_arguments` fills.
"""

from __future__ import annotations

import os

from .._setting_values import AGENT_TELEMETRY_SPAN_MODES, NOTIFICATION_SPAN_MODES, TOOL_SPAN_MODES

TYPE_CHECKING = False  # not typing's: this module is imported before the agent starts (type checkers see True)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence
    from typing import Any

ENV_DEBUG = "OTEL_PYTHON_ACP_PROXY_DEBUG"
ENV_AGENT_TELEMETRY = "OTEL_PYTHON_ACP_AGENT_TELEMETRY"
ENV_AGENT_TELEMETRY_SPANS = "OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS"
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
DEFAULT_FLUSH_TIMEOUT_S = 1.0
"""The default ``--flush-timeout``; equal to ``telemetry.FLUSH_BUDGET_S`` (not imported: this module
must stay light)."""

DESCRIPTION = (
    "Start CMD with pipes for its stdin and stdout (stderr passes through), relay the ACP messages between "
    "this process's stdio (the editor) and CMD (the agent) byte for byte, and trace them: a span per request "
    "and notification, child of the trace context the sender put in params._meta, with the proxy span's "
    "context written into the forwarded message. Telemetry is configured from the standard OTEL_* "
    "environment (OTEL_EXPORTER_OTLP_ENDPOINT, _PROTOCOL, OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES, ...); "
    "the options below override the OTEL_PYTHON_ACP_* variables. Exits with the agent's exit status."
)


class ProxyOptions:
    """What ``acp-otel proxy`` was asked to do."""

    __slots__ = (
        "agent_telemetry",
        "agent_telemetry_spans",
        "command",
        "flush_timeout_s",
        "max_line_bytes",
        "service_name",
        "settings_options",
        "verbose",
    )

    def __init__(
        self,
        command: tuple[str, ...],
        service_name: str | None = None,
        settings_options: dict[str, Any] | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S,
        verbose: bool = False,
        agent_telemetry: bool = False,
        agent_telemetry_spans: str = "genai",
    ) -> None:
        self.command = command
        self.service_name = service_name
        self.settings_options: dict[str, Any] = settings_options if settings_options is not None else {}
        self.max_line_bytes = max_line_bytes
        self.flush_timeout_s = flush_timeout_s
        self.verbose = verbose
        # Receive the agent's own telemetry, join it to the turns and forward it (see .agent_telemetry).
        self.agent_telemetry = agent_telemetry
        # Which of the agent's spans are forwarded (AGENT_TELEMETRY_SPAN_MODES; see .span_filter).
        self.agent_telemetry_spans = agent_telemetry_spans


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the proxy's options and the agent command to ``parser``."""
    import argparse

    parser.add_argument(
        "--service-name",
        metavar="NAME",
        help="service.name of the proxy's telemetry, over OTEL_SERVICE_NAME (default: OTEL_SERVICE_NAME, else "
        "service.name in OTEL_RESOURCE_ATTRIBUTES, else CMD's name + '-proxy'; the agent is named after CMD)",
    )
    parser.add_argument(
        "--capture-content",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="record prompts, results and tool arguments on spans (OTEL_PYTHON_ACP_CAPTURE_CONTENT; default off)",
    )
    parser.add_argument(
        "--notification-spans",
        choices=NOTIFICATION_SPAN_MODES,
        help="spans for notifications (OTEL_PYTHON_ACP_NOTIFICATION_SPANS)",
    )
    parser.add_argument(
        "--tool-spans",
        choices=TOOL_SPAN_MODES,
        help="tool call spans (OTEL_PYTHON_ACP_TOOL_SPANS)",
    )
    parser.add_argument(
        "--inject",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write trace context into forwarded messages' params._meta (OTEL_PYTHON_ACP_INJECT; default on)",
    )
    parser.add_argument(
        "--inject-excluded-methods",
        metavar="PATTERNS",
        help="comma-separated methods (wildcards * ?) never injected into (OTEL_PYTHON_ACP_INJECT_EXCLUDED_METHODS)",
    )
    parser.add_argument(
        "--excluded-methods",
        metavar="PATTERNS",
        help="comma-separated methods (wildcards * ?) not traced (OTEL_PYTHON_ACP_EXCLUDED_METHODS)",
    )
    parser.add_argument(
        "--tool-names-from-titles",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="name tool calls nothing else names after the identifier their first title starts with, or never "
        "(OTEL_PYTHON_ACP_TOOL_NAMES_FROM_TITLES; default: as the agent's profile says)",
    )
    parser.add_argument(
        "--extra-trace-keys",
        metavar="KEYS",
        help="comma-separated presets (qwen) or _meta keys ending in traceparent/tracestate, written beside the "
        "reserved trace keys (OTEL_PYTHON_ACP_EXTRA_TRACE_KEYS; default none)",
    )
    parser.add_argument(
        "--agent-telemetry",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="point the agent's own OpenTelemetry at a loopback receiver of the proxy, hang its spans under the "
        "turns and forward it with the proxy's exporter settings (OTEL_PYTHON_ACP_AGENT_TELEMETRY; default off)",
    )
    parser.add_argument(
        "--agent-telemetry-spans",
        choices=AGENT_TELEMETRY_SPAN_MODES,
        help="with --agent-telemetry, the agent's spans forwarded: genai (model calls, tool calls, agent "
        "invocations, HTTP client calls inside them and their ancestors) or all (OTEL_PYTHON_ACP_AGENT_TELEMETRY_SPANS;"
        " default genai)",
    )
    parser.add_argument(
        "--max-line-bytes",
        type=int,
        default=DEFAULT_MAX_LINE_BYTES,
        metavar="N",
        help=f"longer lines are relayed untraced, in chunks, never buffered whole (default {DEFAULT_MAX_LINE_BYTES})",
    )
    parser.add_argument(
        "--flush-timeout",
        type=float,
        default=DEFAULT_FLUSH_TIMEOUT_S,
        metavar="SECONDS",
        help=f"at most this long exporting what is left after the agent exits (default {DEFAULT_FLUSH_TIMEOUT_S:g})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=f"diagnostics on stderr (also: {ENV_DEBUG}=true)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]", help="the agent command")


def options_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ProxyOptions:
    """The :class:`ProxyOptions` of parsed arguments."""
    environ = os.environ if environ is None else environ
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    settings: dict[str, Any] = {}
    for name in (
        "capture_content",
        "notification_spans",
        "tool_spans",
        "inject",
        "inject_excluded_methods",
        "excluded_methods",
        "tool_names_from_titles",
        "extra_trace_keys",
    ):
        value = getattr(args, name)
        if value is not None:
            settings[name] = value
    agent_telemetry = args.agent_telemetry
    if agent_telemetry is None:
        agent_telemetry = _agent_telemetry_from(environ)
    return ProxyOptions(
        command=tuple(command),
        service_name=args.service_name,
        settings_options=settings,
        max_line_bytes=max(1, args.max_line_bytes),
        flush_timeout_s=max(0.0, args.flush_timeout),
        verbose=_verbose(bool(args.verbose), environ),
        agent_telemetry=agent_telemetry,
        agent_telemetry_spans=args.agent_telemetry_spans or _agent_telemetry_spans_from(environ),
    )


def plain_command(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> ProxyOptions | None:
    """The options of ``-- CMD [ARGS...]`` (the proxy's arguments with no option before ``--``): those the parser
    gives for it; ``None`` for any other arguments (the parser's to read)."""
    if len(argv) < 2 or argv[0] != "--":
        return None
    env = os.environ if environ is None else environ
    return ProxyOptions(
        command=tuple(argv[1:]),
        verbose=_verbose(False, env),
        agent_telemetry=_agent_telemetry_from(env),
        agent_telemetry_spans=_agent_telemetry_spans_from(env),
    )


def _verbose(flag: bool, environ: Mapping[str, str]) -> bool:
    return flag or environ.get(ENV_DEBUG, "").strip().lower() in ("1", "true", "yes", "on")


def _agent_telemetry_from(environ: Mapping[str, str]) -> bool:
    return environ.get(ENV_AGENT_TELEMETRY, "").strip().lower() in ("1", "true", "yes", "on")


def _agent_telemetry_spans_from(environ: Mapping[str, str]) -> str:
    """The variable's mode; unset or not a mode: ``genai``."""
    value = environ.get(ENV_AGENT_TELEMETRY_SPANS, "").strip().lower()
    return value if value in AGENT_TELEMETRY_SPAN_MODES else AGENT_TELEMETRY_SPAN_MODES[0]
