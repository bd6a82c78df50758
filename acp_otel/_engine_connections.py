"""The engine's entry points about a whole connection, not one message: the facts a connection tells of itself,
the agent at its other end and what that agent's own telemetry reports, the turns' observer, and the end of a
connection or of instrumenting. :class:`~acp_otel._engine.Engine` builds the state these read and inherits them;
the per-message entry points are its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from . import _semconv as sc
from ._agent_identity import AgentIdentity
from ._connection import PeerRegistry, PeerState
from ._context_facts import DirectionFacts
from ._message_spans import MessageSpans
from ._turns import TurnLayer

_log = logging.getLogger("acp_otel")


class ConnectionEntryPoints:
    """What the adapters tell the engine about whole connections (never called per message)."""

    # Built by Engine.__init__ (its per-message paths read the same objects).
    _connections: PeerRegistry
    _peers: dict[int, PeerState]
    _agents: AgentIdentity
    _turns: TurnLayer
    _spans: MessageSpans
    _facts: DirectionFacts

    def peer_state(self, peer: Any) -> PeerState | None:
        """The state kept for one connection (created on first use; ``None`` if ``peer`` cannot be
        weakly referenced)."""
        return self._connections.state(peer)

    def note_connection_facts(self, peer: Any, facts: Mapping[str, Any]) -> None:
        """Facts about the connection itself (its id, the peer's address): on its spans from now on.

        The adapter of a remote transport learns them when the connection is made (or when its
        ``initialize`` completes); they join the ``initialize`` facts, never the metrics.
        """
        state = self._connections.state(peer)
        if state is not None and facts:
            state.learn(facts)

    def note_agent_command(self, peer: Any, command: Any) -> None:
        """The command line of the agent at the other end of ``peer`` (``["npx", "@scope/pkg"]``), when the
        adapter knows it: its agent profile applies until ``initialize`` names the agent (``agentInfo.name``).
        Looked up once here, never per message."""
        try:
            state = self._connections.state(peer)
            if state is not None:
                self._agents.note_command(state, command)
        except Exception:
            _log.debug("acp_otel: could not look up the agent command's profile", exc_info=True)

    def observe_turns(self, observer: Any) -> None:
        """Tell ``observer`` of every turn's start and end: ``observer.turn_started(turn)`` and
        ``observer.turn_ended(turn)`` (:class:`~acp_otel._turn_state.Turn`; called where the turn starts and
        ends, so they must be quick and must not call the engine). The proxy's receiver of the agent's own
        telemetry uses it to hang the agent's spans under the turn."""
        self._turns.observer = observer

    def note_agent_reports(self, peer: Any, *, tools: bool = False, usage: bool = False) -> None:
        """The agent's own telemetry reports its tool calls (``tools``) or its token usage (``usage``): from the
        next turn on, tool spans and usage are not made here in the ``auto`` modes (each fact once)."""
        state = self._connections.known(peer)
        if state is not None:
            if tools:
                state.agent_reports_tools = True
            if usage:
                state.agent_reports_usage = True

    def close_peer(self, peer: Any, *, keep_requests: bool = False) -> None:
        """The connection is gone: end every turn and tool span still open for it.

        Tool spans and ACP v2 turn spans end with ``acp.tool_call.ended_by`` / ``acp.turn.ended_by`` =
        ``connection_closed`` (status unchanged: not an error). A v1 turn is its ``session/prompt`` span,
        which ends as a closed connection (``ConnectionError``) unless ``keep_requests`` (the SDK adapter:
        the SDK itself rejects or cancels those requests). Safe to call twice; never raises.
        """
        state = self._connections.known(peer)
        if state is not None:
            self._spans.close_turns(state, sc.ENDED_BY_CONNECTION, keep_requests)

    def shutdown(self) -> None:
        """Uninstrumenting: end the tool calls and v2 turns still open on every connection (marked
        ``uninstrumented``) and forget every connection. A request in flight keeps its span, which its
        adapter still ends when the request does (with its v1 turn)."""
        for state in list(self._peers.values()):
            self._spans.close_turns(state, sc.ENDED_BY_SHUTDOWN, True)
        self._peers.clear()
        self._facts.clear()
