"""The proxy's own tracer provider, configured from the standard ``OTEL_*`` environment.

Why not ``opentelemetry-distro``'s configurator: it is private API (``_OTelSDKConfigurator``), it would
also start metric and log pipelines, it defaults to gRPC (a slow import on every agent start), its
``console`` exporter writes to stdout (the proxy's stdout is the protocol), and its exit handler
flushes without a bound. So this module reads the same variables itself:

* ``OTEL_SDK_DISABLED``, ``OTEL_TRACES_EXPORTER`` (``otlp`` default, ``console`` to stderr, ``none``,
  or any name registered under the ``opentelemetry_traces_exporter`` entry point group);
* ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` (``http/protobuf`` default, as the specification says, or
  ``grpc``); endpoint, headers, timeout and certificates are read by the exporters themselves;
* ``OTEL_TRACES_SAMPLER[_ARG]`` (read by ``TracerProvider``), ``OTEL_BSP_*`` (by the batch processor);
* ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` (by ``Resource.create``); without a service
  name there, the one derived from the agent command is used.

Metrics (for the engine's agent-layer instruments): ``OTEL_METRICS_EXPORTER`` (``otlp`` default,
``console`` to stderr, ``none``), ``OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL``, ``OTEL_METRIC_EXPORT_INTERVAL``
(read by the periodic reader); built only when asked for by :func:`meter_provider_from_env`.

Export runs in the batch processor's and the metric reader's threads, so a dead endpoint never blocks
the relay; the final flush is bounded by :meth:`Telemetry.flush`'s timeout.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_log = logging.getLogger("acp_otel")

_UNKNOWN_SERVICE = "unknown_service"


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


class _Deferred(SpanExporter):
    """A span exporter built on first use, in the batch processor's thread.

    Building the OTLP exporter imports requests and protobuf (~100 ms); deferring it keeps that off
    the path from the agent's start to the editor's first answer. Implements the ``SpanExporter``
    interface by delegation.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._exporter: Any = None
        self._failed = False

    def _get(self) -> Any:
        with self._lock:
            if self._exporter is None and not self._failed:
                try:
                    self._exporter = _exporter(self._name)
                except Exception:
                    _log.debug("acp_otel proxy: could not build the %r exporter", self._name, exc_info=True)
                self._failed = self._exporter is None
            return self._exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        exporter = self._get()
        return exporter.export(spans) if exporter is not None else SpanExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        exporter = self._exporter
        return bool(exporter.force_flush(timeout_millis)) if exporter is not None else True

    def shutdown(self) -> None:
        if self._exporter is not None:
            self._exporter.shutdown()


def _exporter(name: str) -> Any:
    if name == "otlp":
        protocol = (_env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")).lower()
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            return GrpcExporter()
        if protocol not in ("", "http/protobuf"):
            _log.warning("acp_otel proxy: OTLP protocol %r is not supported; using http/protobuf", protocol)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout carries the protocol
    from opentelemetry.util._importlib_metadata import entry_points

    for entry_point in entry_points(group="opentelemetry_traces_exporter", name=name):
        return entry_point.load()()
    _log.warning("acp_otel proxy: unknown traces exporter %r ignored", name)
    return None


def _metric_exporter(name: str) -> Any:
    if name == "otlp":
        protocol = (_env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")).lower()
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

            return Grpc()
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stderr)
    _log.warning("acp_otel proxy: unsupported metrics exporter %r ignored", name)
    return None


def meter_provider_from_env(resource: Any) -> Any:
    """A meter provider exporting as ``OTEL_METRICS_EXPORTER`` says, or ``None`` when metrics are off."""
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return None
    names = [n.strip().lower() for n in (_env("OTEL_METRICS_EXPORTER") or "otlp").split(",") if n.strip()]
    exporters = [e for e in (_metric_exporter(n) for n in names if n != "none") if e is not None]
    if not exporters:
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    readers = [PeriodicExportingMetricReader(e) for e in exporters]
    return MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False)


class Telemetry:
    """A tracer provider with batch export (or nothing at all when tracing is off), and optionally a
    meter provider for the engine's metrics."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.meter_provider: Any = None

    def add_meter_provider(self) -> Any:
        """Build the meter provider from the environment (same resource as the spans); ``None`` if off."""
        if self.provider is not None and self.meter_provider is None:
            self.meter_provider = meter_provider_from_env(self.provider.resource)
        return self.meter_provider

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def tracer(self) -> trace.Tracer:
        from ..version import __version__

        return trace.get_tracer("acp_otel._proxy", __version__, tracer_provider=self.provider)

    def flush(self, timeout_s: float) -> bool:
        """Export what is buffered, waiting at most ``timeout_s`` (the SDK's own flush has no bound)."""
        if self.provider is None:
            return True
        done = threading.Event()

        def run() -> None:
            try:
                self.provider.force_flush()
                if self.meter_provider is not None:
                    self.meter_provider.force_flush()
            except Exception:
                _log.debug("acp_otel proxy: flush failed", exc_info=True)
            finally:
                done.set()

        threading.Thread(target=run, name="acp-otel-flush", daemon=True).start()
        return done.wait(timeout_s)


def configure(service_name: str, explicit_service_name: bool) -> Telemetry:
    """Build the provider from the environment; ``service_name`` applies unless the environment names one.

    ``explicit_service_name`` (``--service-name`` given) makes ``service_name`` win over the environment.
    """
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return Telemetry(None)
    names = [n.strip().lower() for n in (_env("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    # Only the OTLP exporter is deferred: another name may be unknown, which must be known now.
    built: list[Any] = [_Deferred(n) if n == "otlp" else _exporter(n) for n in names if n != "none"]
    exporters: list[SpanExporter] = [e for e in built if e is not None]
    if not exporters:
        return Telemetry(None)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    named = str(resource.attributes.get("service.name", "")).startswith(_UNKNOWN_SERVICE) is False
    if explicit_service_name or not named:
        resource = resource.merge(Resource({"service.name": service_name}))
    # No exit hook: the proxy flushes itself, bounded, before it exits.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return Telemetry(provider)
