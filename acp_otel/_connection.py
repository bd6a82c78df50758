"""What one connection has told us: the peer registry, ``initialize`` facts and facts of remote transports.

A connection is any weak-referenceable object the adapter passes as ``peer``. Its :class:`PeerState` holds the
facts its later spans carry (the other side's name and version, the negotiated protocol version, a remote
transport's connection id and address), the turn in flight per session and what the agent proved about itself.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import Span

from . import _semconv as sc
from ._agent_profiles import AgentProfile
from ._turn_state import Turn


class PeerState:
    """What one connection has told us: initialize facts, the turn in flight per session."""

    __slots__ = (
        "__weakref__",
        "agent_reports_tools",
        "agent_reports_usage",
        "agent_traced",
        "attributes",
        "base_attributes",
        "command",
        "costs",
        "profile",
        "protocol_version",
        "ref",
        "turns",
        "usage_totals",
    )

    def __init__(self, ref: weakref.ref[Any]) -> None:
        self.ref = ref  # the connection (the registry is keyed by its id, which may be reused)
        self.attributes: dict[str, Any] = {}
        # MessageSpans' start attributes per (method, session id); cleared when the facts above change.
        self.base_attributes: dict[tuple[str, str | None], dict[str, Any]] = {}
        self.turns: dict[str, Turn] = {}
        self.protocol_version: int | None = None  # negotiated in initialize (2: ACP v2 turns)
        # A session/update of the agent's arrived with trace context: the agent reports usage (see Turn).
        self.agent_traced = False
        # The agent's own telemetry (the proxy's receiver) reports its tool calls / its token usage: from the
        # next turn on, this side does not report them again (Engine.note_agent_reports).
        self.agent_reports_tools = False
        self.agent_reports_usage = False
        self.costs: dict[str, tuple[float, str]] = {}  # the last cumulative cost per session (usage_update)
        # The last running total of token counts per session (agents whose usage is a running total).
        self.usage_totals: dict[str, dict[str, int]] = {}
        # The agent's profile, looked up once (initialize's agentInfo, else the command); None: the engine's default.
        self.profile: AgentProfile | None = None
        self.command: str | None = None  # the agent command's name, when the adapter knows it (the proxy)

    def learn(self, facts: Mapping[str, Any]) -> None:
        """Facts for this connection's later spans (the cached start attributes are built again)."""
        self.attributes.update(facts)
        self.base_attributes.clear()


class PeerRegistry:
    """The state of every connection, keyed by ``id(peer)`` and checked against a weak reference.

    The engine reads :attr:`by_id` itself on every message (one C-level lookup, where a ``WeakKeyDictionary``
    costs two Python calls and a new reference) and calls :meth:`state` only on a miss. A collected peer's
    entry goes with it; nothing is left on the peer objects.
    """

    def __init__(self) -> None:
        self.by_id: dict[int, PeerState] = {}

    def state(self, peer: Any) -> PeerState | None:
        """The state kept for one connection (created on first use; ``None`` if ``peer`` cannot be weakly
        referenced)."""
        if peer is None:
            return None
        state = self.by_id.get(id(peer))
        if state is not None and state.ref() is peer:
            return state
        key = id(peer)
        peers = self.by_id

        def forget(ref: weakref.ref[Any]) -> None:
            entry = peers.get(key)
            if entry is not None and entry.ref is ref:
                del peers[key]

        try:
            state = PeerState(weakref.ref(peer, forget))
        except TypeError:  # not weak-referenceable: trace without per-connection facts
            return None
        peers[key] = state
        return state

    def known(self, peer: Any) -> PeerState | None:
        """The state of a connection seen before (none is created)."""
        state = self.by_id.get(id(peer)) if peer is not None else None
        return state if state is not None and state.ref() is peer else None


# ------------------------------------------------------------------ initialize


def initialize_params(span: Span, peer: PeerState | None, params: dict[str, Any]) -> None:
    """An ``initialize`` request: the client's facts on its span and the connection's later spans."""
    _initialize_facts(span, peer, params, "clientInfo", sc.ACP_CLIENT_NAME, sc.ACP_CLIENT_VERSION)
    _declared_extensions(span, params.get("clientCapabilities"), sc.ACP_CLIENT_CAPABILITIES_EXTENSIONS)


def initialize_result(span: Span, peer: PeerState | None, result: dict[str, Any]) -> None:
    """An ``initialize`` result: the agent's facts on the request's span and the connection's later spans."""
    _initialize_facts(span, peer, result, "agentInfo", sc.GEN_AI_AGENT_NAME, sc.GEN_AI_AGENT_VERSION)
    _declared_extensions(span, result.get("agentCapabilities"), sc.ACP_AGENT_CAPABILITIES_EXTENSIONS)


def negotiated_version(peer: PeerState, result: dict[str, Any]) -> None:
    """The protocol version an ``initialize`` result settles (2: ACP v2 turns), whether or not it is sampled."""
    version = result.get("protocolVersion")
    if type(version) is int:
        peer.protocol_version = version
        peer.base_attributes.clear()


def _initialize_facts(
    span: Span, peer: PeerState | None, obj: dict[str, Any], info_key: str, name_attr: str, version_attr: str
) -> None:
    """Protocol version on the span; the side's name/version on the span and the connection's later spans."""
    version = obj.get("protocolVersion")
    if type(version) is int:
        span.set_attribute(sc.ACP_PROTOCOL_VERSION, version)
    info = obj.get(info_key)
    if info is None:
        info = obj.get("info")  # ACP v2 names both sides' Implementation "info"
    facts = {}
    if type(info) is dict:
        for attr, key in ((name_attr, "name"), (version_attr, "version")):
            value = info.get(key)
            if type(value) is str:
                facts[attr] = value
    if facts:
        span.set_attributes(facts)
        if peer is not None:
            peer.learn(facts)


def _declared_extensions(span: Span, capabilities: Any, attr: str) -> None:
    extensions = _meta_keys(capabilities)
    if extensions:
        span.set_attribute(attr, extensions)


def _meta_keys(obj: Any) -> list[str]:
    if type(obj) is dict:
        meta = obj.get("_meta")
        if type(meta) is dict:
            return sorted(k for k in meta if type(k) is str)
    return []
