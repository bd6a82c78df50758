"""``AcpInstrumentor``: the entry point that ``opentelemetry-instrument`` and applications use."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from . import sdk_adapter, shutdown, spawn
from .engine import Engine
from .metrics import make_instruments
from .package import _instruments
from .settings import Settings, load_settings
from .version import __version__

_log = logging.getLogger("acp_otel")


class AcpInstrumentor(BaseInstrumentor):
    """Traces the ACP Python SDK (``agent-client-protocol``) with OpenTelemetry.

    ``AcpInstrumentor().instrument(tracer_provider=None, **options)`` starts tracing every
    ``acp.connection.Connection`` (whether ``acp`` is imported before or after the call);
    ``uninstrument()`` restores the SDK exactly; ``meter_provider`` (default: the global one) receives the
    metrics. Options (keyword arguments win over the
    ``OTEL_PYTHON_ACP_*`` environment variables; see the README's options table):
    ``excluded_methods``, ``capture_content``, ``capture_content_max_length``, ``keep_sdk_spans``,
    ``notification_spans``, ``tool_spans``, ``max_events_per_span``, ``propagate_env``, ``inject``,
    ``inject_excluded_methods``.
    """

    _settings: Settings | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    @property
    def settings(self) -> Settings | None:
        """The settings in force while instrumented, else ``None``."""
        return self._settings

    def _instrument(self, **kwargs: Any) -> None:
        tracer_provider = kwargs.pop("tracer_provider", None)
        meter_provider = kwargs.pop("meter_provider", None)  # None: the global one
        settings = load_settings(kwargs)
        tracer = trace.get_tracer("acp_otel", __version__, tracer_provider)
        self._settings = settings
        sdk_adapter.install(Engine(tracer, settings, make_instruments(meter_provider, __version__)))
        spawn.install(tracer, settings)  # spawned agents inherit OTEL_* and get an acp.spawn span
        shutdown.install(tracer_provider)  # flush at end of input and on SIGTERM

    def _uninstrument(self, **kwargs: Any) -> None:
        shutdown.uninstall()
        spawn.uninstall()
        sdk_adapter.uninstall()
        self._settings = None
