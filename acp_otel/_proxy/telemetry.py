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
the relay. Exit stays within an editor's patience: spans are exported continuously (a batch every
:data:`SCHEDULE_DELAY_MS` unless ``OTEL_BSP_SCHEDULE_DELAY`` says otherwise), one OTLP export gives up
after :data:`EXPORT_TIMEOUT_S` (unless ``OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`` says otherwise), and the
final flush waits at most :data:`FLUSH_BUDGET_S` (:meth:`Telemetry.finish`).

What could not be exported, and every setting that was rejected, is said in one line on stderr at exit
(:meth:`Telemetry.finish`), with the reason: nothing listening at the endpoint, an endpoint that answers
another protocol, a flush that did not finish in time.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

from .collector import Collector as _Collector
from .collector import install_collector

_log = logging.getLogger("acp_otel")

_UNKNOWN_SERVICE = "unknown_service"

FLUSH_BUDGET_S = 1.0
"""Upper bound of the proxy's final flush: the SDK's ``spawn_stdio_transport`` sends SIGTERM 2 s after
closing the agent's stdin, ``acpx`` SIGKILLs 1.5 s after its SIGTERM; the agent's own exit comes first."""
EXPORT_TIMEOUT_S = 0.8
"""One OTLP export (with its retries) gives up after this long, unless ``OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT``
is set: the exporter's default (10 s, retrying with back-off) would hold a flush far past any editor's grace."""
SCHEDULE_DELAY_MS = 200
"""The batch processor exports every 200 ms (the SDK's default is 5 s), so little is left to flush at exit."""
PROBE_TIMEOUT_S = 0.3
PREFIX = "acp-otel proxy: "
_DEFAULT_HTTP = "http://localhost:4318"
_DEFAULT_GRPC = "http://localhost:4317"


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


class _Accounted(SpanExporter):
    """A span exporter that counts what it exported and what it lost, and for ``otlp`` is built on first
    use, in the batch processor's thread.

    Building the OTLP exporter imports requests and protobuf (~100 ms); deferring it keeps that off
    the path from the agent's start to the editor's first answer. Implements the ``SpanExporter``
    interface by delegation.
    """

    def __init__(self, name: str, exporter: Any = None) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._exporter: Any = exporter
        self._failed = False
        self.exported = 0
        self.lost = 0

    def _get(self) -> Any:
        with self._lock:
            if self._exporter is None and not self._failed:
                try:
                    self._exporter = _exporter(self.name)
                except Exception:
                    _log.warning("could not build the %r exporter", self.name, exc_info=_log.isEnabledFor(10))
                self._failed = self._exporter is None
            return self._exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        exporter = self._get()
        result = SpanExportResult.FAILURE
        try:
            if exporter is not None:
                result = exporter.export(spans)
        finally:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.lost += len(spans)
        return result

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        exporter = self._exporter
        return bool(exporter.force_flush(timeout_millis)) if exporter is not None else True

    def shutdown(self) -> None:
        if self._exporter is not None:
            self._exporter.shutdown()


def _export_timeout(signal_name: str) -> float | None:
    """``EXPORT_TIMEOUT_S`` unless the environment sets the exporter's timeout (then the exporter reads it)."""
    if _env(f"OTEL_EXPORTER_OTLP_{signal_name}_TIMEOUT") or _env("OTEL_EXPORTER_OTLP_TIMEOUT"):
        return None
    return EXPORT_TIMEOUT_S


def otlp_protocol(signal_name: str = "TRACES") -> str:
    """The OTLP protocol in effect: ``grpc`` or ``http/protobuf`` (the default, also for an unsupported value)."""
    protocol = (_env(f"OTEL_EXPORTER_OTLP_{signal_name}_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")).lower()
    return "grpc" if protocol == "grpc" else "http/protobuf"


def otlp_endpoint(signal_name: str = "TRACES") -> tuple[str, bool]:
    """The OTLP endpoint the exporter of ``signal_name`` (``TRACES``, ``METRICS``) uses, and whether it is the
    default (nothing configured)."""
    grpc = otlp_protocol(signal_name) == "grpc"
    specific = _env(f"OTEL_EXPORTER_OTLP_{signal_name}_ENDPOINT")
    if specific:
        return specific, False
    base = _env("OTEL_EXPORTER_OTLP_ENDPOINT")
    if grpc:
        return base or _DEFAULT_GRPC, not base
    return (base or _DEFAULT_HTTP).rstrip("/") + f"/v1/{signal_name.lower()}", not base


def traces_endpoint() -> tuple[str, bool]:
    """The OTLP traces endpoint the exporter uses, and whether it is the default (nothing configured)."""
    return otlp_endpoint("TRACES")


def _exporter(name: str) -> Any:
    if name == "otlp":
        protocol = (_env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")).lower()
        timeout = _export_timeout("TRACES")
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

            return GrpcExporter(timeout=timeout)
        if protocol not in ("", "http/protobuf"):
            _log.warning("OTLP protocol %r is not supported; using http/protobuf", protocol)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(timeout=timeout)
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout carries the protocol
    from .._otel_private import entry_points

    for entry_point in entry_points(group="opentelemetry_traces_exporter", name=name):
        return entry_point.load()()
    _log.warning("unknown traces exporter %r (OTEL_TRACES_EXPORTER) ignored", name)
    return None


def _metric_exporter(name: str) -> Any:
    if name == "otlp":
        protocol = (_env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or _env("OTEL_EXPORTER_OTLP_PROTOCOL")).lower()
        timeout = _export_timeout("METRICS")
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as Grpc

            return Grpc(timeout=timeout)
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(timeout=timeout)
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stderr)
    _log.warning("unsupported metrics exporter %r (OTEL_METRICS_EXPORTER) ignored", name)
    return None


class MetricAccount:
    """What one metric exporter exported and how many of its exports failed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.exported = 0
        self.failed = 0


def _accounted_metrics(exporter: Any, account: MetricAccount) -> Any:
    """``exporter`` with its ``export`` counted in ``account`` (the periodic reader calls it)."""
    from opentelemetry.sdk.metrics.export import MetricExportResult

    export = exporter.export

    def counted(*args: Any, **kwargs: Any) -> Any:
        result = None
        try:
            result = export(*args, **kwargs)
        finally:
            if result is MetricExportResult.SUCCESS:
                account.exported += 1
            else:
                account.failed += 1
        return result

    exporter.export = counted
    return exporter


def metrics_exporter_names() -> list[str]:
    """``OTEL_METRICS_EXPORTER`` as a list of names (``otlp`` when unset), ``none`` left out."""
    names = [n.strip().lower() for n in (_env("OTEL_METRICS_EXPORTER") or "otlp").split(",") if n.strip()]
    return [n for n in names if n != "none"]


def traces_exporter_names() -> list[str]:
    """``OTEL_TRACES_EXPORTER`` as a list of names (``otlp`` when unset), ``none`` left out."""
    names = [n.strip().lower() for n in (_env("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    return [n for n in names if n != "none"]


def meter_provider_from_env(resource: Any, accounts: list[MetricAccount] | None = None) -> Any:
    """A meter provider exporting as ``OTEL_METRICS_EXPORTER`` says, or ``None`` when metrics are off.

    Each exporter's exports are counted in a :class:`MetricAccount` appended to ``accounts``."""
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return None
    exporters = []
    for name in metrics_exporter_names():
        exporter = _metric_exporter(name)
        if exporter is not None:
            account = MetricAccount(name)
            if accounts is not None:
                accounts.append(account)
            exporters.append(_accounted_metrics(exporter, account))
    if not exporters:
        return None
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    readers = [PeriodicExportingMetricReader(e) for e in exporters]
    return MeterProvider(metric_readers=readers, resource=resource, shutdown_on_exit=False, views=histogram_views())


def histogram_views() -> list[Any]:
    """One View per histogram of the engine (meter ``acp_otel``), with that histogram's bucket boundaries.

    The engine asks for its boundaries with the API's advisory, which the SDK applies in full from 1.32 only
    (before 1.30 there is no advisory, 1.30 ignores it, 1.31 gives every histogram the first one's); Views hold
    on every supported SDK. The provider is the proxy's own, so it is the proxy's to configure.
    """
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

    from .._metrics import HISTOGRAM_BUCKETS

    return [
        View(meter_name="acp_otel", instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(buckets))
        for name, buckets in HISTOGRAM_BUCKETS.items()
    ]


def _probe(url: str) -> str:
    """``refused``, ``silent`` (no answer in time), ``open`` or ``unresolved`` for the endpoint's host and port."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "unresolved"
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=PROBE_TIMEOUT_S):
            return "open"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "silent"
    except OSError:
        return "unresolved"


def why_not_exported(endpoint: str, protocol: str, errors: list[str]) -> str:
    """Why an endpoint did not take spans, from a probe of its port and the exporters' errors."""
    state = _probe(endpoint)
    if state == "refused":
        return "nothing is listening there"
    if state == "silent":
        return "it does not answer"
    if state == "unresolved":
        return "its host cannot be reached"
    code = next((m.group(1) for e in errors if (m := re.search(r"code: (\d{3})", e))), None)
    answered = f"it answered HTTP {code}" if code else "it did not take them"
    if protocol == "grpc":
        return f"{answered} over OTLP/gRPC (an OTLP/HTTP port? OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf selects HTTP)"
    if code in (None, "400", "404", "405", "415", "505"):
        return f"{answered} over OTLP/HTTP (an OTLP/gRPC port? OTEL_EXPORTER_OTLP_PROTOCOL=grpc selects gRPC)"
    return answered


def describe_loss(lost: int, exported: int, endpoint: str, default: bool, protocol: str, errors: list[str]) -> str:
    """Why spans did not arrive, in one sentence (probes the endpoint's port)."""
    what = f"{lost} span{'s' if lost != 1 else ''}" if not exported else f"{lost} of {lost + exported} spans"
    where = f"{endpoint} (the default endpoint: OTEL_EXPORTER_OTLP_ENDPOINT is not set)" if default else endpoint
    return f"{what} not exported to {where}: {why_not_exported(endpoint, protocol, errors)}"


def describe_metrics_loss(failed: int, endpoint: str, default: bool, errors: list[str], spans_arrived: bool) -> str:
    """Why metric exports failed, in one sentence (probes the endpoint's port)."""
    what = f"metrics not exported ({failed} export{'s' if failed != 1 else ''} failed)"
    where = f"{endpoint} (the default endpoint: OTEL_EXPORTER_OTLP_ENDPOINT is not set)" if default else endpoint
    code = next((m.group(1) for e in errors if (m := re.search(r"code: (\d{3})", e))), None)
    if spans_arrived and code is not None:  # the same backend took the spans: it does not take metrics
        why = f"it answered HTTP {code} (a backend for traces only? OTEL_METRICS_EXPORTER=none turns metrics off)"
    else:
        why = why_not_exported(endpoint, otlp_protocol("METRICS"), errors)
    return f"{what} to {where}: {why}"


class Telemetry:
    """A tracer provider with batch export (``None`` when tracing is off), and optionally a meter provider
    for the engine's metrics: each signal on or off by its own settings."""

    def __init__(
        self,
        provider: Any,
        exporters: Sequence[_Accounted] = (),
        collector: _Collector | None = None,
        resource: Any = None,
        id_generator: Any = None,
    ):
        self.provider = provider
        self.resource = resource if resource is not None or provider is None else provider.resource
        self.meter_provider: Any = None
        self.metric_accounts: list[MetricAccount] = []
        self.exporters = list(exporters)
        self.collector = collector
        self.id_generator = id_generator
        self._metrics_built = False
        # More of the exit line: each returns its sentences (the agent's own telemetry's losses).
        self.more_problems: list[Callable[[], list[str]]] = []
        # --agent-telemetry: the exporters that move spans under the agent's tool spans (.tool_parents), released
        # at exit once the agent's own spans are all joined (``agent_joined(timeout_s)`` waits for that).
        self.tool_parents: list[Any] = []
        self.agent_joined: Callable[[float], bool] | None = None

    def add_meter_provider(self) -> Any:
        """Build the meter provider from the environment (same resource as the spans); ``None`` if off."""
        if not self._metrics_built and self.resource is not None:
            self._metrics_built = True
            self.meter_provider = meter_provider_from_env(self.resource, self.metric_accounts)
        return self.meter_provider

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded (metrics may be on either way)."""
        return self.provider is not None

    def tracer(self) -> trace.Tracer:
        from ..version import __version__

        return trace.get_tracer("acp_otel._proxy", __version__, tracer_provider=self.provider)

    def force_ids(self, trace_id: int | None, span_id: int | None) -> None:
        """The ids of the next span the tracer starts (``None``: random, as usual); see :class:`ReplayIds`."""
        if self.id_generator is not None:
            self.id_generator.force(trace_id, span_id)

    def settled(self, service_hint: str = "") -> str:
        """Where each signal goes, with which protocol, and the service name: the ``-v`` line at start."""
        parts = []
        for signal_name, names, on in (
            ("traces", [e.name for e in self.exporters], self.provider is not None),
            ("metrics", [a.name for a in self.metric_accounts], self.meter_provider is not None),
        ):
            if not on:
                parts.append(f"{signal_name} off")
                continue
            where = []
            for name in names:
                if name == "otlp":
                    endpoint, default = otlp_endpoint(signal_name.upper())
                    protocol = otlp_protocol(signal_name.upper())
                    where.append(f"{endpoint} ({protocol}{', the default endpoint' if default else ''})")
                elif name == "console":
                    where.append("stderr (console)")
                else:
                    where.append(f"the {name!r} exporter")
            parts.append(f"{signal_name} to {' and '.join(where)}")
        service = self.resource.attributes.get("service.name") if self.resource is not None else service_hint
        return "; ".join(parts) + f"; service.name {service}"

    def flush(self, timeout_s: float = FLUSH_BUDGET_S) -> bool:
        """Export what is buffered, waiting at most ``timeout_s`` (the SDK's own flush has no bound)."""
        if self.provider is None and self.meter_provider is None:
            return True
        done = threading.Event()

        started = time.monotonic()

        def run() -> None:
            try:
                if self.provider is not None:
                    try:
                        self.provider.force_flush()
                    finally:
                        self._release_held(started + timeout_s / 2)
                if self.meter_provider is not None:
                    self.meter_provider.force_flush()
            except Exception:
                _log.debug("flush failed", exc_info=True)
            finally:
                done.set()

        threading.Thread(target=run, name="acp-otel-flush", daemon=True).start()
        return done.wait(timeout_s)

    def _release_held(self, wait_until: float) -> None:
        """Export the spans held for the agent's tool spans, once the agent's last spans are joined (waited for
        until ``wait_until``, monotonic)."""
        if self.tool_parents:
            if self.agent_joined is not None:
                self.agent_joined(max(0.0, wait_until - time.monotonic()))
            for tool_parents in self.tool_parents:
                tool_parents.release()

    def problems(self, flushed: bool, timeout_s: float) -> list[str]:
        """What went wrong with telemetry: rejected settings, spans and metrics not exported and why."""
        found = list(self.collector.warnings) if self.collector is not None else []
        otlp = [e for e in self.exporters if e.name == "otlp"]
        lost = sum(e.lost for e in otlp)
        exported = sum(e.exported for e in otlp)
        errors = self.collector.export_errors if self.collector is not None else []
        endpoint, default = traces_endpoint()
        if lost:
            found.append(describe_loss(lost, exported, endpoint, default, otlp_protocol(), errors))
        metric_failures = sum(a.failed for a in self.metric_accounts if a.name == "otlp")
        if metric_failures:
            metrics_endpoint, metrics_default = otlp_endpoint("METRICS")
            metric_errors = self.collector.metric_errors if self.collector is not None else []
            spans_arrived = exported > 0 and not lost and urlsplit(endpoint).netloc == urlsplit(metrics_endpoint).netloc
            found.append(
                describe_metrics_loss(metric_failures, metrics_endpoint, metrics_default, metric_errors, spans_arrived)
            )
        for more in self.more_problems:
            found.extend(more())
        if not flushed:
            unfinished = f"the export had not finished after {timeout_s:g} s (--flush-timeout); the rest is lost"
            if otlp and not lost:  # still trying: say where to, and what the endpoint looks like
                why = why_not_exported(endpoint, otlp_protocol(), errors)
                unfinished = f"the export to {endpoint} had not finished after {timeout_s:g} s (--flush-timeout); "
                unfinished += "the rest is lost" + ("" if why.startswith("it did not take") else f" ({why})")
            found.append(unfinished)
        return found

    def finish(self, timeout_s: float = FLUSH_BUDGET_S, err: TextIO | None = None) -> bool:
        """At exit: flush (at most ``timeout_s``), then say in ONE line on stderr what could not be exported
        and which settings were rejected, if anything; ``True`` if there was nothing to say."""
        flushed = self.flush(timeout_s)
        try:
            found = self.problems(flushed, timeout_s)
        except Exception:
            _log.debug("could not describe the export", exc_info=True)
            return flushed
        if found:
            stream = err if err is not None else sys.stderr
            try:
                stream.write(PREFIX + "telemetry: " + "; ".join(found) + "\n")
                stream.flush()
            except Exception:
                pass
        return not found


class ReplayIds(IdGenerator):
    """The SDK's random ids, except for a span the proxy already gave ids to (see :mod:`.deferred`):
    :meth:`force` sets the next span's ids, and :meth:`generate_span_id` / :meth:`generate_trace_id` hand
    them out once. Only the proxy's engine starts spans on this provider, under the message tracer's lock."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._trace_id: int | None = None
        self._span_id: int | None = None

    def force(self, trace_id: int | None, span_id: int | None) -> None:
        self._trace_id, self._span_id = trace_id, span_id

    def generate_span_id(self) -> int:
        span_id, self._span_id = self._span_id, None
        return span_id if span_id is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        trace_id, self._trace_id = self._trace_id, None
        return trace_id if trace_id is not None else self._random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        # The SDK asks (from 1.40) whether trace ids are random: ours are, forced or not.
        return True


def configure(
    service_name: str, explicit_service_name: bool, collector: _Collector | None = None, agent: Any = None
) -> Telemetry:
    """Build the tracer provider from the environment; ``service_name`` applies unless the environment names one.

    ``explicit_service_name`` (``--service-name`` given) makes ``service_name`` win over the environment.
    The resource is built whatever the traces settings, for the metrics (:meth:`Telemetry.add_meter_provider`).
    The warnings and exporters' errors :meth:`Telemetry.finish` reports are those ``collector`` (from
    :func:`install_collector`) keeps; without one, collecting starts here. ``agent``: the agent's own telemetry
    (:class:`~.agent_telemetry.AgentTelemetry`, ``--agent-telemetry``): the proxy's spans that serve a tool call
    it reports then go under its tool span (:mod:`.tool_parents`).
    """
    if collector is None:
        collector = install_collector()
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return Telemetry(None, collector=collector)
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create()
    named = str(resource.attributes.get("service.name", "")).startswith(_UNKNOWN_SERVICE) is False
    if explicit_service_name or not named:
        resource = resource.merge(Resource({"service.name": service_name}))
    names = traces_exporter_names()
    # Only the OTLP exporter is deferred: another name may be unknown, which must be known now.
    built = [(n, _Accounted(n) if n == "otlp" else _exporter(n)) for n in names]
    exporters = [e if isinstance(e, _Accounted) else _Accounted(n, e) for n, e in built if e is not None]
    if not exporters:
        return Telemetry(None, collector=collector, resource=resource)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    ids = ReplayIds()
    # No exit hook: the proxy flushes itself, bounded, before it exits.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False, id_generator=ids)
    delay = None if _env("OTEL_BSP_SCHEDULE_DELAY") else SCHEDULE_DELAY_MS
    tool_parents = []
    if agent is not None:
        provider.add_span_processor(agent.proxy_tools.processor())
    for exporter in exporters:
        processed: SpanExporter = exporter
        if agent is not None:
            from .tool_parents import ToolParents

            processed = ToolParents(exporter, agent.tool_span)
            agent.on_tool_span(processed.tool_span_seen)
            tool_parents.append(processed)
        provider.add_span_processor(BatchSpanProcessor(processed, schedule_delay_millis=delay))
    telemetry = Telemetry(provider, exporters, collector, id_generator=ids)
    if agent is not None:
        telemetry.tool_parents = tool_parents
        telemetry.agent_joined = agent.joined
    return telemetry
