"""The metric instruments of the agent layer, and the bounding of their attribute values.

Histograms in seconds with explicit bucket boundaries (an advisory the SDK applies unless a View says
otherwise): the SDK's default boundaries are sized for milliseconds, agents work in seconds to minutes.
Token and cost counters, recorded by one side per turn (the ``usage`` option), so that sums hold.
Every attribute value is from a bounded set: never a session, request or tool call id, never content.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from opentelemetry import metrics

from . import _otel_private as otel_private
from . import _semconv as sc

_log = logging.getLogger("acp_otel")

# mcp.client/server.operation.duration's boundaries (MCP semantic conventions).
REQUEST_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# A turn: a second to an hour (long agentic turns with permission prompts).
TURN_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
# A tool call includes the user's permission decision: tens of ms to half an hour.
TOOL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
FIRST_CHUNK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)

# Extension method names kept as they are in metric attributes, per engine; later ones are _OTHER.
MAX_EXTENSION_METHODS = 32
# Agent names kept per engine (an agent name comes from the peer): later ones are _OTHER.
MAX_AGENT_NAMES = 16
# Tool names kept per engine (a tool name comes from the peer): later ones are _OTHER.
MAX_TOOL_NAMES = 32
# Currencies kept per engine (a currency comes from the peer): later ones are _OTHER.
MAX_CURRENCIES = 8
# Attribute sets remembered per kind of record. The keys are the raw values (a peer can send endless
# ones), so the cache is capped; past the cap a record builds its dict as before.
MAX_CACHED_ATTRIBUTE_SETS = 1024


class Bounded:
    """Maps values to themselves while fewer than ``limit`` distinct ones were seen, then to ``_OTHER``."""

    __slots__ = ("_known", "_limit", "_seen")

    def __init__(self, limit: int, known: frozenset[str] = frozenset()) -> None:
        self._known = known
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: Any) -> str:
        if type(value) is not str:
            return sc.OTHER
        if value in self._known or value in self._seen:
            return value
        if len(self._seen) < self._limit:
            self._seen.add(value)
            return value
        return sc.OTHER


class Instruments:
    """The histograms and counters the engine records, created once from one meter."""

    recording: Callable[[], bool]
    """``False`` while these are the API's proxy instruments with no ``MeterProvider`` set behind them: every
    record would be dropped, so the engine skips the clock reads and attribute lookups a record needs. Asked
    per request, turn and tool call, so metrics start as soon as a provider is set."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.client_duration = meter.create_histogram(
            sc.METRIC_CLIENT_OPERATION_DURATION,
            unit="s",
            description="Duration of ACP requests this process sent, until the response arrived.",
            explicit_bucket_boundaries_advisory=REQUEST_BUCKETS,
        )
        self.server_duration = meter.create_histogram(
            sc.METRIC_SERVER_OPERATION_DURATION,
            unit="s",
            description="Duration of ACP requests this process handled, until the response was ready.",
            explicit_bucket_boundaries_advisory=REQUEST_BUCKETS,
        )
        self.turn_duration = meter.create_histogram(
            sc.METRIC_INVOKE_AGENT_DURATION,
            unit="s",
            description="Duration of an ACP prompt turn (session/prompt; on ACP v2 until the idle state), "
            "recorded by the side closest to the agent.",
            explicit_bucket_boundaries_advisory=TURN_BUCKETS,
        )
        # The same turn as the other sides (an editor or proxy in front of a traced agent) see it.
        self.client_turn_duration = meter.create_histogram(
            sc.METRIC_CLIENT_OPERATION_DURATION_GENAI,
            unit="s",
            description="Duration of an ACP prompt turn as a client of the agent saw it (gen_ai.operation.name "
            "invoke_agent), recorded by the sides that do not record gen_ai.invoke_agent.duration.",
            explicit_bucket_boundaries_advisory=TURN_BUCKETS,
        )
        self.tool_duration = meter.create_histogram(
            sc.METRIC_EXECUTE_TOOL_DURATION,
            unit="s",
            description="Duration of an ACP tool call, from its first tool_call update to completed/failed.",
            explicit_bucket_boundaries_advisory=TOOL_BUCKETS,
        )
        self.first_chunk = meter.create_histogram(
            sc.METRIC_TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time from the start of a turn to its first agent message or thought chunk.",
            explicit_bucket_boundaries_advisory=FIRST_CHUNK_BUCKETS,
        )
        # Usage counters: recorded by one side per turn (the usage option), so sums across processes hold.
        self.input_tokens = meter.create_counter(
            sc.METRIC_TURN_INPUT_TOKENS,
            unit="{token}",
            description="Input tokens of ACP prompt turns, as the agent reported them.",
        )
        self.output_tokens = meter.create_counter(
            sc.METRIC_TURN_OUTPUT_TOKENS,
            unit="{token}",
            description="Output tokens of ACP prompt turns, as the agent reported them.",
        )
        self.cost = meter.create_counter(
            sc.METRIC_TURN_COST,
            unit="{currency_unit}",
            description="Cost of ACP prompt turns (the change of the session's cumulative cost), per currency.",
        )
        extension = Bounded(MAX_EXTENSION_METHODS)
        self._agent_name = Bounded(MAX_AGENT_NAMES)
        self._tool_name = Bounded(MAX_TOOL_NAMES)

        def method(name: str) -> str:
            if name in sc.STANDARD_METHODS:
                return name
            return extension(name) if sc.is_extension(name) else sc.OTHER

        self.method_name = method
        self.stop_reason = Bounded(
            8, frozenset(("end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"))
        )
        self.error_type = Bounded(32)
        self._currency = Bounded(MAX_CURRENCIES)

        # One shared dict per distinct input: histograms only read their attributes, and building them
        # (bounding each value) on every record was most of what a record cost us.
        self._cache: dict[tuple[Any, ...], dict[str, str]] = {}
        # Instruments made from the API's proxy (the global MeterProvider before one is set) drop every record
        # until a provider is set, then all get real ones at once: one of them tells for all (_otel_private).
        # An instance attribute, so that asking costs one call, as a method did.
        self.recording = otel_private.recording_check(self.turn_duration)

    def agent_attributes(self, name: Any) -> dict[str, str]:
        """``{gen_ai.agent.name: bounded name}``, or nothing when the agent did not say its name."""
        return {sc.GEN_AI_AGENT_NAME: self._agent_name(name)} if type(name) is str else {}

    def _remember(self, key: tuple[Any, ...], attributes: dict[str, str]) -> dict[str, str]:
        if len(self._cache) < MAX_CACHED_ATTRIBUTE_SETS:
            self._cache[key] = attributes
        return attributes

    # The callers pass hashable values only (strings or None, checked where they were read).

    def request_attributes(self, method_name: str, error_type: str | None) -> dict[str, str]:
        """Attributes of a request-duration record; ``method_name`` is already bounded. Shared: read only."""
        key = ("request", method_name, error_type)
        attributes = self._cache.get(key)
        if attributes is None:
            attributes = {sc.ACP_METHOD_NAME: method_name}
            if error_type is not None:
                attributes[sc.ERROR_TYPE] = self.error_type(error_type)
            attributes = self._remember(key, attributes)
        return attributes

    def turn_attributes(self, agent: Any, stop_reason: str | None, error_type: str | None) -> dict[str, str]:
        """Attributes of a turn-duration record (bounded agent name, stop reason, error type). Shared: read only."""
        key = ("turn", agent if type(agent) is str else None, stop_reason, error_type)
        attributes = self._cache.get(key)
        if attributes is None:
            attributes = {sc.GEN_AI_OPERATION_NAME: sc.INVOKE_AGENT, **self.agent_attributes(agent)}
            if stop_reason is not None:
                attributes[sc.ACP_STOP_REASON] = self.stop_reason(stop_reason)
            if error_type is not None:
                attributes[sc.ERROR_TYPE] = self.error_type(error_type)
            attributes = self._remember(key, attributes)
        return attributes

    def agent_only_attributes(self, agent: Any) -> dict[str, str]:
        """The bounded agent name: first-chunk and token records. Shared: read only."""
        key = ("agent", agent if type(agent) is str else None)
        attributes = self._cache.get(key)
        if attributes is None:
            attributes = self._remember(key, self.agent_attributes(agent))
        return attributes

    def cost_attributes(self, agent: Any, currency: str) -> dict[str, str]:
        """The bounded agent name and currency of a cost record (never a session id). Shared: read only."""
        key = ("cost", agent if type(agent) is str else None, currency)
        attributes = self._cache.get(key)
        if attributes is None:
            attributes = self.agent_attributes(agent)
            attributes[sc.ACP_USAGE_COST_CURRENCY] = self._currency(currency)
            attributes = self._remember(key, attributes)
        return attributes

    def tool_attributes(self, agent: Any, name: str | None, kind: str | None, status: str | None) -> dict[str, str]:
        """Attributes of a tool-duration record (bounded agent, tool name, kind, status; error.type when failed).
        Shared: read only."""
        key = ("tool", agent if type(agent) is str else None, name, kind, status)
        attributes = self._cache.get(key)
        if attributes is None:
            attributes = {sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL, **self.agent_attributes(agent)}
            if name is not None:
                attributes[sc.GEN_AI_TOOL_NAME] = self._tool_name(name)
            attributes[sc.ACP_TOOL_CALL_KIND] = self.tool_kind(kind)
            attributes[sc.ACP_TOOL_CALL_STATUS] = status if status in sc.TOOL_STATUSES else sc.OTHER
            if status == "failed":
                attributes[sc.ERROR_TYPE] = sc.TOOL_FAILED
            attributes = self._remember(key, attributes)
        return attributes

    @staticmethod
    def tool_kind(kind: Any) -> str:
        return kind if type(kind) is str and kind in sc.TOOL_KINDS else sc.OTHER


def make_instruments(meter_provider: metrics.MeterProvider | None, version: str) -> Instruments | None:
    """Instruments from ``meter_provider`` (the global one when ``None``); ``None`` if that fails or the
    provider is a ``NoOpMeterProvider`` (nothing would be recorded: the engine then skips the clock reads
    and records). The global provider before one is set is a proxy that may still get a real one: kept."""
    try:
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        if isinstance(provider, metrics.NoOpMeterProvider):
            return None
        meter = metrics.get_meter("acp_otel", version, meter_provider, schema_url=sc.SCHEMA_URL)
        return Instruments(meter)
    except Exception:  # a broken provider (or an API that no longer takes our arguments) must not stop tracing
        _log.debug("acp_otel: could not create the metric instruments; no metrics are recorded", exc_info=True)
        return None
