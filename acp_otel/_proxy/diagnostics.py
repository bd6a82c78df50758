"""The proxy's own diagnostics on stderr: nothing unless asked for (``-v``), then ``acp-otel proxy: MESSAGE``."""

from __future__ import annotations

import logging
import re
import sys

_PREFIX_RE = re.compile(r"^(?:acp[_-]otel(?: proxy)?: )+")


class DiagnosticFormatter(logging.Formatter):
    """``-v`` diagnostics: ``acp-otel proxy: MESSAGE`` (``acp-otel proxy: opentelemetry...: MESSAGE`` for
    the OpenTelemetry SDK's own), never a doubled prefix whatever prefix a message already carries."""

    def format(self, record: logging.LogRecord) -> str:
        message = _PREFIX_RE.sub("", super().format(record))
        source = "" if record.name.split(".")[0] == "acp_otel" else f"{record.name}: "
        return f"acp-otel proxy: {source}{message}"


def configure_logging(verbose: bool) -> None:
    """Diagnostics of ``acp_otel`` and ``opentelemetry`` on stderr with ``verbose``, else nowhere."""
    # Without a handler, logging's last resort would print library warnings (e.g. export retries
    # against a dead endpoint) on stderr; diagnostics appear only when asked for.
    for name in ("acp_otel", "opentelemetry"):
        logger = logging.getLogger(name)
        logger.propagate = False
        if verbose:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(DiagnosticFormatter())
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
        else:
            logger.addHandler(logging.NullHandler())
    if not verbose:
        import warnings

        warnings.simplefilter("ignore")
