"""Command-line options of ``acp-otel proxy`` (argparse only: this module is imported on every start)."""

from __future__ import annotations

import argparse
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _settings as settings

ENV_DEBUG = "OTEL_PYTHON_ACP_PROXY_DEBUG"
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


_PREFIX_RE = re.compile(r"^(?:acp[_-]otel(?: proxy)?: )+")


class DiagnosticFormatter(logging.Formatter):
    """``-v`` diagnostics: ``acp-otel proxy: MESSAGE`` (``acp-otel proxy: opentelemetry...: MESSAGE`` for
    the OpenTelemetry SDK's own), never a doubled prefix whatever prefix a message already carries."""

    def format(self, record: logging.LogRecord) -> str:
        message = _PREFIX_RE.sub("", super().format(record))
        source = "" if record.name.split(".")[0] == "acp_otel" else f"{record.name}: "
        return f"acp-otel proxy: {source}{message}"


@dataclass(frozen=True)
class ProxyOptions:
    """What ``acp-otel proxy`` was asked to do."""

    command: tuple[str, ...]
    service_name: str | None = None
    settings_options: dict[str, Any] = field(default_factory=dict)
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    flush_timeout_s: float = DEFAULT_FLUSH_TIMEOUT_S
    verbose: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the proxy's options and the agent command to ``parser``."""
    parser.add_argument(
        "--service-name",
        metavar="NAME",
        help="service.name of the proxy's spans (default: CMD's name + '-proxy'; the agent is named after CMD)",
    )
    parser.add_argument(
        "--capture-content",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="record prompts, results and tool arguments on spans (OTEL_PYTHON_ACP_CAPTURE_CONTENT; default off)",
    )
    parser.add_argument(
        "--notification-spans",
        choices=settings.NOTIFICATION_SPAN_MODES,
        help="spans for notifications (OTEL_PYTHON_ACP_NOTIFICATION_SPANS)",
    )
    parser.add_argument(
        "--tool-spans",
        choices=settings.TOOL_SPAN_MODES,
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
    verbose = bool(args.verbose) or environ.get(ENV_DEBUG, "").strip().lower() in ("1", "true", "yes", "on")
    return ProxyOptions(
        command=tuple(command),
        service_name=args.service_name,
        settings_options=settings,
        max_line_bytes=max(1, args.max_line_bytes),
        flush_timeout_s=max(0.0, args.flush_timeout),
        verbose=verbose,
    )
