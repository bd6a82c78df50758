"""The state of one prompt turn and of its open tool calls: plain data the turn and tool-call layers share.

Kept apart from :mod:`._turns` and :mod:`._tool_calls` (which both change it) so that neither imports the other
for it, and so that a connection's facts (:mod:`._connection`) can hold its turns without importing either.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context, create_key
from opentelemetry.trace import Span

from ._agent_profiles import UNKNOWN, AgentProfile

# In the context a request serving a tool call hangs from when this side has no span for that tool call (the
# agent's own telemetry reports it): the tool call's id, which its span then carries (``acp.tool_call.id``).
UNSPANNED_TOOL_KEY = create_key("acp_otel.unspanned_tool_call_id")

# Where a tool call's name came from, best first (a better source found later renames the span).
NAME_ACP, NAME_META, NAME_TITLE, NAME_KIND, NAME_NONE = range(5)


class ToolCall:
    """One open tool call: its span, its name and where that came from, and what its metric needs."""

    __slots__ = (
        "context",
        "events",
        "kind",
        "name",
        "name_rank",
        "result",
        "span",
        "started",
        "status",
        "titled",
        "updates",
    )

    def __init__(self, span: Span, context: Context, kind: str | None, status: str | None) -> None:
        self.span = span
        self.context = context
        self.kind = kind
        self.status = status
        self.started = time.monotonic()
        self.updates = 0
        self.events = 0
        self.name: str | None = None  # gen_ai.tool.name (truncated), from the source ranked name_rank
        self.name_rank = NAME_NONE
        self.titled = False  # a title was seen: only the first one may name the tool
        self.result: Any = None  # the latest rawOutput (capture_content): recorded when the call completes


class Turn:
    """One prompt turn of one session on one connection."""

    __slots__ = (
        "_context",
        "_parent",
        "agent",
        "agent_tools",
        "chunks",
        "closed_tools",
        "context_size",
        "context_used",
        "cost",
        "costs",
        "currency",
        "dropped",
        "ended",
        "error_type",
        "events",
        "first_chunk",
        "output",
        "output_len",
        "own_span",
        "profile",
        "reports_usage",
        "request",
        "session_id",
        "span",
        "started",
        "stop_reason",
        "terminals",
        "tools",
        "unspanned",
        "updates",
        "usage",
        "usage_source",
        "usage_totals",
    )

    def __init__(self, span: Span, parent: Context, session_id: str, own_span: bool, agent: Any) -> None:
        self.span = span
        # The turn's context (see ``context``) is built on first use: most turns never need it.
        self._parent = parent
        self._context: Context | None = None
        self.session_id = session_id
        self.own_span = own_span  # ACP v2: a span of its own, beside the session/prompt request span
        self.agent = agent  # gen_ai.agent.name, for metrics
        # The agent's own telemetry reports its tool calls (the proxy's receiver saw them): no tool spans here.
        self.agent_tools = False
        self.started = time.monotonic()
        self.first_chunk: float | None = None
        self.chunks: dict[str, int] = {}
        self.updates = 0
        self.events = 0
        self.dropped = 0
        self.tools: dict[str, ToolCall] = {}
        # The open tool calls this side made no span for because the agent's own telemetry reports them (ids, in
        # order; built on first use): the requests serving them are marked with their id (see ``unspanned_id``).
        self.unspanned: dict[str, None] | None = None
        # Both built on first use: most turns finish no tool call and report no usage.
        self.closed_tools: set[str] | None = None
        self.terminals: dict[str, str] | None = None  # terminal id -> the tool call whose content embedded it
        self.stop_reason: str | None = None
        self.error_type: str | None = None
        self.usage: dict[str, int] | None = None
        self.usage_source: str | None = None  # acp.usage.source of ``usage`` (see _agent_profiles.USAGE_*)
        # The connection's last running total of token counts per session (profiles whose usage is a running total).
        self.usage_totals: dict[str, dict[str, int]] | None = None
        self.profile: AgentProfile = UNKNOWN  # the connection's agent profile (where tool names are, what usage means)
        self.ended = False
        self.request: Any = None  # v1: the engine's call for the session/prompt span (the turn)
        # Usage, cost and context window: reported on this side's span and metrics only when it is the side
        # closest to the agent (the usage option; the engine clears it when the agent proves traced).
        self.reports_usage = True
        self.context_used: int | None = None
        self.context_size: int | None = None
        self.cost: float | None = None  # the turn's cost: the change of the session's cumulative cost
        self.currency: str | None = None
        self.costs: dict[str, tuple[float, str]] | None = None  # the connection's last cumulative cost per session
        # The streamed agent text, kept only with capture_content and at most capture_content_max_length long.
        self.output: list[str] | None = None
        self.output_len = 0

    @property
    def context(self) -> Context:
        """The turn span's context: children (tool spans, fallback parents) start here."""
        context = self._context
        if context is None:
            context = self._context = trace.set_span_in_context(self.span, self._parent)
        return context

    def tool_context(self, tool_call_id: Any) -> Context | None:
        """The context of the open tool call ``tool_call_id`` names, if any."""
        tool = self.tools.get(tool_call_id) if type(tool_call_id) is str else None
        return tool.context if tool is not None else None

    def _terminal_tool_call(self, params: Any) -> str | None:
        """The tool call whose content embedded the request's ``terminalId``, if any."""
        terminals = self.terminals
        if terminals is None or type(params) is not dict:
            return None
        terminal_id = params.get("terminalId")
        return terminals.get(terminal_id) if type(terminal_id) is str else None

    def served_tool_context(self, params: Any) -> Context | None:
        """The context of the tool call an ``fs/*`` / ``terminal/*`` request serves, if this side knows it: the
        tool call whose content embedded the request's ``terminalId`` (none once that tool call ended), else
        the one tool call open, when exactly one is."""
        tool_call_id = self._terminal_tool_call(params)
        if tool_call_id is not None:
            return self.tool_context(tool_call_id)
        if len(self.tools) == 1:
            for tool in self.tools.values():
                return tool.context
        return None

    def served_unspanned_id(self, params: Any) -> str | None:
        """:meth:`served_tool_context`'s rule over the open tool calls this side made no span for: the id of the
        tool call a request serves, if known."""
        unspanned = self.unspanned
        if not unspanned:
            return None
        tool_call_id = self._terminal_tool_call(params)
        if tool_call_id is not None:
            return tool_call_id if tool_call_id in unspanned else None
        if len(unspanned) == 1:
            return next(iter(unspanned))
        return None
