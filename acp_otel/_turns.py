"""The agent level: prompt turns, their streamed updates and their tool calls, on plain ACP dicts.

The engine hands every ``session/update`` of a session with a turn in flight to :meth:`TurnLayer.on_update`
(whichever side and adapter saw it). A turn counts its chunks per kind and the time to the first agent
chunk; each ``toolCallId`` becomes one ``execute_tool {name}`` span, child of the turn, when this side
makes tool spans; other updates become events. Nothing here raises into the caller: the engine wraps
every call.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from . import _content as content
from . import _semconv as sc
from ._metrics import Instruments
from ._settings import Settings

_log = logging.getLogger("acp_otel")

# A hostile agent can invent endless tool call ids: at most this many open per turn, and this many
# finished ids remembered (so that an update after completed/failed does not open a second span).
MAX_OPEN_TOOLS = 256
MAX_CLOSED_TOOLS = 1024
_MAX_NAME = 128  # characters of a tool name kept in span names and attributes

_CHUNK_ATTRIBUTES = {kind: sc.ACP_TURN_CHUNK_COUNT_PREFIX + kind for kind in sc.CHUNK_KINDS}
_TOOL_UPDATES = frozenset(("tool_call", "tool_call_update"))
_FINAL_STATUSES = frozenset(("completed", "failed"))
_USAGE_UPDATE = sc.USAGE_UPDATE

# Usage and cost (usage_update): values outside these bounds are ignored, never recorded.
_MAX_INT = 2**63  # an OTel int attribute is 64-bit
MAX_COST = 1e12  # a cumulative cost beyond a trillion currency units is not a real figure
_MAX_CURRENCY = 16  # characters (ISO 4217 codes are 3)
# Sessions whose last cumulative cost is remembered per connection (the oldest goes first).
MAX_COST_SESSIONS = 1024

# Where a tool call's name came from, best first (a better source found later renames the span).
NAME_ACP, NAME_META, NAME_TITLE, NAME_KIND, NAME_NONE = range(5)
# tool_names_from_titles: a title that is a plain identifier, alone or before a ':' ("ReadFile",
# "ReadFile: notes.txt"). Anything else (spaces, paths, arguments) names nothing: titles are content.
_TITLE_NAME = re.compile(r"[ \t]*([A-Za-z0-9_.\-]{1,64})[ \t]*(?::|\Z)")
MAX_TERMINALS = 256  # terminal ids remembered per turn (a hostile agent can invent endless ones)


def declared_tool_name(update: dict[str, Any]) -> tuple[str | None, int]:
    """The programmatic tool name an update declares and its rank: ACP's ``name``, else what known agents put
    in ``_meta`` (Claude Code ``claudeCode.toolName``, Qwen Code ``toolName``); ``(None, NAME_NONE)`` if none."""
    name = update.get("name")
    if type(name) is str and name:
        return name, NAME_ACP
    meta = update.get("_meta")
    if type(meta) is dict:
        agent_meta = meta.get(sc.META_CLAUDE_CODE)
        if type(agent_meta) is dict:
            name = agent_meta.get(sc.META_TOOL_NAME)
            if type(name) is str and name:
                return name, NAME_META
        name = meta.get(sc.META_TOOL_NAME)
        if type(name) is str and name:
            return name, NAME_META
    return None, NAME_NONE


def title_tool_name(title: str) -> str | None:
    """The tool name a title gives under ``tool_names_from_titles``: its leading identifier, when the title is
    that identifier alone or followed by ``:`` (``ReadFile``, ``ReadFile: notes.txt``); else ``None``."""
    match = _TITLE_NAME.match(title)
    return match.group(1) if match is not None else None


def truncate(value: Any, limit: int) -> str:
    """``value`` as text (JSON for non-strings), at most ``limit`` characters."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    except Exception:
        text = repr(value)
    return text if len(text) <= limit else text[:limit]


class ToolCall:
    """One open tool call: its span, its name and where that came from, and what its metric needs."""

    __slots__ = ("context", "events", "kind", "name", "name_rank", "span", "started", "status", "titled", "updates")

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


class Turn:
    """One prompt turn of one session on one connection."""

    __slots__ = (
        "_context",
        "_parent",
        "agent",
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
        "reports_usage",
        "request",
        "session_id",
        "span",
        "started",
        "stop_reason",
        "terminals",
        "tools",
        "updates",
        "usage",
    )

    def __init__(self, span: Span, parent: Context, session_id: str, own_span: bool, agent: Any) -> None:
        self.span = span
        # The turn's context (see ``context``) is built on first use: most turns never need it.
        self._parent = parent
        self._context: Context | None = None
        self.session_id = session_id
        self.own_span = own_span  # ACP v2: a span of its own, beside the session/prompt request span
        self.agent = agent  # gen_ai.agent.name, for metrics
        self.started = time.monotonic()
        self.first_chunk: float | None = None
        self.chunks: dict[str, int] = {}
        self.updates = 0
        self.events = 0
        self.dropped = 0
        self.tools: dict[str, ToolCall] = {}
        # Both built on first use: most turns finish no tool call and report no usage.
        self.closed_tools: set[str] | None = None
        self.terminals: dict[str, str] | None = None  # terminal id -> the tool call whose content embedded it
        self.stop_reason: str | None = None
        self.error_type: str | None = None
        self.usage: dict[str, int] | None = None
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

    def served_tool_context(self, params: Any) -> Context | None:
        """The context of the tool call an ``fs/*`` / ``terminal/*`` request serves, if this side knows it: the
        tool call whose content embedded the request's ``terminalId`` (none once that tool call ended), else
        the one tool call open, when exactly one is."""
        terminals = self.terminals
        if terminals is not None and type(params) is dict:
            terminal_id = params.get("terminalId")
            if type(terminal_id) is str:
                tool_call_id = terminals.get(terminal_id)
                if tool_call_id is not None:
                    return self.tool_context(tool_call_id)
        if len(self.tools) == 1:
            for tool in self.tools.values():
                return tool.context
        return None


class TurnLayer:
    """Starts and ends turn and tool spans, counts chunks, records the agent-level metrics."""

    def __init__(self, tracer: trace.Tracer, settings: Settings, instruments: Instruments | None) -> None:
        self._tracer = tracer
        self._settings = settings
        self._instruments = instruments
        mode = settings.notification_spans
        self._turn_events = mode == "turn"  # non-chunk updates become events, kind only
        self._all_events = mode == "events"  # every update becomes an event (the older mode)
        self._capture = settings.capture_content
        self._max_len = settings.capture_content_max_length
        self._max_events = settings.max_events_per_span
        self._usage = settings.usage
        self._names_from_titles = settings.tool_names_from_titles

    # ------------------------------------------------------------------ turns

    def start(
        self,
        request_span: Span | None,
        parent: Context,
        session_id: str,
        facts: dict[str, Any],
        *,
        agent_traced: bool = False,
        costs: dict[str, tuple[float, str]] | None = None,
        params: Any = None,
    ) -> Turn:
        """A turn for a session/prompt: its ``request_span`` (ACP v1, started under ``parent``), or, when
        ``request_span`` is None (ACP v2, where ``session/prompt`` answers when the prompt is accepted), an
        INTERNAL span ``invoke_agent [agent]`` of its own under ``parent``, ending at the ``idle`` state.

        ``agent_traced``: the agent's messages on this connection carried trace context (so it reports its
        own usage); ``costs``: the connection's last cumulative cost per session; ``params``: the prompt's
        (its content is recorded only with ``capture_content``).
        """
        agent = facts.get(sc.ACP_AGENT_NAME)
        if request_span is not None:
            turn = Turn(request_span, parent, session_id, False, agent)
            self._begin(turn, agent_traced, costs, params)
            return turn
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.INVOKE_AGENT,
            sc.ACP_SESSION_ID: session_id,
            sc.GEN_AI_CONVERSATION_ID: session_id,
        }
        attributes.update(facts)
        agent_attributes(attributes, facts)
        name = f"{sc.ACP_TURN_SPAN_NAME} {agent}" if type(agent) is str else sc.ACP_TURN_SPAN_NAME
        span = self._tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes)
        turn = Turn(span, parent, session_id, True, agent)
        self._begin(turn, agent_traced, costs, params)
        return turn

    def _begin(self, turn: Turn, agent_traced: bool, costs: dict[str, tuple[float, str]] | None, params: Any) -> None:
        mode = self._usage
        turn.reports_usage = mode == "always" or (mode == "auto" and not agent_traced)
        turn.costs = costs
        if self._capture:
            turn.output = []
            if turn.span.is_recording():
                try:  # whatever the prompt holds, the turn keeps its span
                    self._input_attributes(turn.span, params)
                except Exception:
                    _log.debug("acp_otel: failed to record the prompt's content", exc_info=True)

    def _input_attributes(self, span: Span, params: Any) -> None:
        prompt = params.get("prompt") if type(params) is dict else None
        parts = content.prompt_parts(prompt)
        limit = self._max_len
        text = content.parts_text(parts, limit)  # first: messages_json shortens the parts it fits
        span.set_attributes(
            {
                sc.GEN_AI_INPUT_MESSAGES: content.messages_json([{"role": "user", "parts": parts}], limit),
                sc.INPUT_VALUE: text,
                sc.INPUT_MIME_TYPE: sc.TEXT_PLAIN,
            }
        )

    def agent_traced(self, turn: Turn) -> None:
        """A message of the agent's arrived with trace context: the traced agent reports the turn's usage."""
        if self._usage == "auto":
            turn.reports_usage = False

    def end(self, turn: Turn, ended_by: str | None = None, timed: bool | None = None) -> None:
        """End the turn's open tool calls (marked), annotate the turn span, record the turn metrics.

        A v2 turn span is ended here; a v1 turn's span is the request span, which the engine ends.
        ``timed``: whether to record the turn's metrics (the engine knows for a v1 turn: when its request is
        timed); ``None``: when the instruments record.
        """
        if turn.ended:
            return
        turn.ended = True
        if turn.tools:
            self.end_tools(turn, ended_by or sc.ENDED_BY_TURN)
        span = turn.span
        now = time.monotonic()
        if span.is_recording():
            attributes: dict[str, Any] = {_CHUNK_ATTRIBUTES[k]: n for k, n in turn.chunks.items()}
            if turn.first_chunk is not None:
                attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = turn.first_chunk - turn.started
            if turn.updates:
                attributes[sc.ACP_SESSION_UPDATE_COUNT] = turn.updates
            if turn.dropped:
                attributes[sc.ACP_SESSION_UPDATE_DROPPED] = turn.dropped
            if ended_by is not None:
                attributes[sc.ACP_TURN_ENDED_BY] = ended_by
            if not turn.own_span and turn.stop_reason is not None:  # v1: the engine left it to this batch
                attributes[sc.ACP_STOP_REASON] = turn.stop_reason
            if turn.reports_usage:
                self._usage_attributes(turn, attributes)
            if turn.output is not None:
                self._output_attributes(turn, attributes, ended_by)
            span.set_attributes(attributes)
        instruments = self._instruments
        if timed is None:
            timed = instruments is not None and instruments.recording()
        if timed and instruments is not None:  # the turn's metrics (written out here: every turn)
            agent = turn.agent
            if turn.first_chunk is not None:
                first_chunk = turn.first_chunk - turn.started
                instruments.first_chunk.record(first_chunk, instruments.agent_only_attributes(agent))
            if turn.reports_usage:
                usage = turn.usage
                if usage:
                    tokens = usage.get(sc.GEN_AI_USAGE_INPUT_TOKENS)
                    if tokens is not None:
                        instruments.input_tokens.add(tokens, instruments.agent_only_attributes(agent))
                    tokens = usage.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS)
                    if tokens is not None:
                        instruments.output_tokens.add(tokens, instruments.agent_only_attributes(agent))
                if turn.cost is not None and turn.currency is not None:
                    instruments.cost.add(turn.cost, instruments.cost_attributes(agent, turn.currency))
            turn_attributes = instruments.turn_attributes(agent, turn.stop_reason, turn.error_type)
            instruments.turn_duration.record(now - turn.started, turn_attributes)
        if turn.own_span:
            span.end()

    @staticmethod
    def _usage_attributes(turn: Turn, attributes: dict[str, Any]) -> None:
        if turn.usage:
            attributes.update(turn.usage)
        if turn.context_used is not None:
            attributes[sc.ACP_USAGE_CONTEXT_USED] = turn.context_used
        if turn.context_size is not None:
            attributes[sc.ACP_USAGE_CONTEXT_SIZE] = turn.context_size
        if turn.cost is not None and turn.currency is not None:
            attributes[sc.ACP_USAGE_COST_AMOUNT] = turn.cost
            attributes[sc.ACP_USAGE_COST_CURRENCY] = turn.currency

    def _output_attributes(self, turn: Turn, attributes: dict[str, Any], ended_by: str | None) -> None:
        text = "".join(turn.output or ())
        failed = turn.error_type is not None or ended_by is not None
        message = content.output_message(text, turn.stop_reason, failed)
        attributes[sc.GEN_AI_OUTPUT_MESSAGES] = content.messages_json([message], self._max_len)
        attributes[sc.OUTPUT_VALUE] = text
        attributes[sc.OUTPUT_MIME_TYPE] = sc.TEXT_PLAIN

    def end_tools(self, turn: Turn, ended_by: str) -> None:
        """End the turn's open tool calls, marked ``acp.tool_call.ended_by = ended_by`` (not an error)."""
        for tool_call_id, tool in list(turn.tools.items()):
            self._end_tool(turn, tool_call_id, tool, ended_by)

    # ---------------------------------------------------------------- updates

    def on_update(self, turn: Turn, params: Any, make_tools: bool) -> Context | None:
        """Account for one ``session/update`` of the turn; the context of the tool call it names, if any."""
        update = params.get("update") if type(params) is dict else None
        if type(update) is not dict:
            return None
        kind = update.get("sessionUpdate")
        turn.updates += 1
        if type(kind) is not str:  # hostile: not even hashable, perhaps
            kind = None
        elif kind in _CHUNK_ATTRIBUTES:
            turn.chunks[kind] = turn.chunks.get(kind, 0) + 1
            if turn.first_chunk is None and kind in sc.AGENT_CHUNK_KINDS:
                turn.first_chunk = time.monotonic()
            if turn.output is not None and kind == "agent_message_chunk":
                self._keep_text(turn, update)
            if self._all_events:
                self._turn_event(turn, update, params)
            return None
        context = None
        if kind in _TOOL_UPDATES:
            context = self._tool_update(turn, update, make_tools)
            if self._all_events or (self._turn_events and context is None and not make_tools):
                self._turn_event(turn, update, params)  # no tool span on this side: keep the fact on the turn
        elif self._all_events or self._turn_events:
            self._turn_event(turn, update, params)
        if kind == _USAGE_UPDATE:
            self._usage_update(turn, update)
        if kind == sc.V2_STATE_UPDATE and turn.own_span:
            state = update.get("state")
            if state == "idle":
                self.take_result(turn, update)
                self.end(turn)
        return context

    def _keep_text(self, turn: Turn, update: dict[str, Any]) -> None:
        """Keep an agent message chunk's text (capture_content), up to the max length in all."""
        room = self._max_len - turn.output_len
        block = update.get("content")
        if room > 0 and type(block) is dict and block.get("type") == "text":
            text = block.get("text")
            if type(text) is str and text:
                text = text[:room]
                assert turn.output is not None
                turn.output.append(text)
                turn.output_len += len(text)

    def _usage_update(self, turn: Turn, update: dict[str, Any]) -> None:
        """A ``usage_update``: the context window (last seen), and the session's cumulative cost."""
        used = update.get("used")
        if type(used) is int and 0 <= used < _MAX_INT:
            turn.context_used = used
        size = update.get("size")
        if type(size) is int and 0 <= size < _MAX_INT:
            turn.context_size = size
        cost = update.get("cost")
        if type(cost) is not dict:
            return
        value = cost.get("amount")
        currency = cost.get("currency")
        if type(value) is not int and type(value) is not float:  # not bool, not a string
            return
        if not 0 <= value <= MAX_COST:  # negative, huge (2**70), NaN: ignored
            return
        if type(currency) is not str or not 0 < len(currency) <= _MAX_CURRENCY:
            return
        amount = float(value)
        if not math.isfinite(amount):
            return
        costs = turn.costs
        previous = costs.get(turn.session_id) if costs is not None else None
        if previous is None or previous[1] != currency or amount < previous[0]:
            # The session's first figure on this connection, a new currency, or a reset: counted from zero.
            spent = amount
        else:
            spent = amount - previous[0]
        if turn.cost is None or turn.currency != currency:
            turn.cost, turn.currency = spent, currency
        else:
            turn.cost += spent
        turn.cost = round(turn.cost, 12)  # float subtraction noise (0.3 - 0.1)
        if costs is not None:
            if turn.session_id not in costs and len(costs) >= MAX_COST_SESSIONS:
                del costs[next(iter(costs))]
            costs[turn.session_id] = (amount, currency)

    def _turn_event(self, turn: Turn, update: dict[str, Any], params: Any) -> None:
        if turn.events >= self._max_events:
            turn.dropped += 1
            return
        span = turn.span
        if not span.is_recording():
            return
        turn.events += 1
        attributes: dict[str, Any] = {}
        update_attributes(attributes, update)
        state = update.get("state")
        if type(state) is str:
            attributes[sc.ACP_TURN_STATE] = state
        if self._capture:
            attributes[sc.ACP_PARAMS] = truncate(params, self._max_len)
        span.add_event(sc.SESSION_UPDATE_EVENT, attributes)

    def take_result(self, turn: Turn, source: Any) -> None:
        """Stop reason and usage from a v1 ``session/prompt`` result or a v2 ``idle`` state update."""
        if type(source) is not dict:
            return
        span = turn.span
        stop_reason = source.get("stopReason")
        if type(stop_reason) is str:
            turn.stop_reason = stop_reason
            if turn.own_span and span.is_recording():  # v1: the engine sets it on the request span
                span.set_attribute(sc.ACP_STOP_REASON, stop_reason)
        usage = source.get("usage")
        if type(usage) is not dict:
            return
        tokens: dict[str, int] = {}
        for key, attribute in sc.USAGE_ATTRIBUTES:
            value = usage.get(key)
            if type(value) is int and 0 <= value < _MAX_INT:
                tokens[attribute] = value
        if not tokens:
            return
        if turn.usage is None:
            turn.usage = tokens
        else:
            turn.usage.update(tokens)

    # ------------------------------------------------------------- tool calls

    def _tool_update(self, turn: Turn, update: dict[str, Any], make_tools: bool) -> Context | None:
        tool_call_id = update.get("toolCallId")
        if type(tool_call_id) is not str:
            return None
        tool = turn.tools.get(tool_call_id)
        status = update.get("status")
        if type(status) is not str:
            status = None
        if tool is None:
            # Updates after completed/failed, or beyond the cap, open nothing: one span per tool call.
            closed = turn.closed_tools
            if not make_tools or (closed is not None and tool_call_id in closed) or len(turn.tools) >= MAX_OPEN_TOOLS:
                return None
            tool = self._open_tool(turn, tool_call_id, update, status)
        else:
            tool.updates += 1
            kind = update.get("kind")
            kind_changed = False
            if type(kind) is str and tool.kind != kind:
                tool.kind = kind
                kind_changed = True
                if tool.span.is_recording():
                    tool.span.set_attribute(sc.ACP_TOOL_CALL_KIND, kind)
            # A better name may come with a later update: only updates that may carry one are looked at.
            if tool.name_rank != NAME_ACP and (
                kind_changed or "name" in update or "_meta" in update or not tool.titled
            ):
                self._rename_tool(tool, update)
            if self._capture:
                self._tool_content(tool.span, update)
        if status is not None and status != tool.status:
            self._tool_status(tool, status)
        if "content" in update:
            self._note_terminals(turn, tool_call_id, update)
        context = tool.context
        if status in _FINAL_STATUSES:
            self._end_tool(turn, tool_call_id, tool, None)
        return context

    def sight_tool(self, turn: Turn, tool_call: Any, make_tools: bool) -> Context | None:
        """A ``session/request_permission``'s ``toolCall`` (a tool call update): the context of the tool call it
        names. A tool call not seen yet is first seen here (some agents ask before they announce the call): its
        span opens now, when this side makes tool spans, so that the user's decision time is inside it."""
        if type(tool_call) is not dict:
            return None
        tool_call_id = tool_call.get("toolCallId")
        if type(tool_call_id) is not str:
            return None
        tool = turn.tools.get(tool_call_id)
        if tool is not None:
            return tool.context
        closed = turn.closed_tools
        if not make_tools or (closed is not None and tool_call_id in closed) or len(turn.tools) >= MAX_OPEN_TOOLS:
            return None
        status = tool_call.get("status")
        if type(status) is not str:
            status = None
        tool = self._open_tool(turn, tool_call_id, tool_call, status)
        if status is not None:
            self._tool_status(tool, status)  # not final here: the tool call's own updates end it
        if "content" in tool_call:
            self._note_terminals(turn, tool_call_id, tool_call)
        return tool.context

    def _tool_status(self, tool: ToolCall, status: str) -> None:
        tool.status = status
        span = tool.span
        if span.is_recording():
            span.set_attribute(sc.ACP_TOOL_CALL_STATUS, status)
            if tool.events < self._max_events:
                tool.events += 1
                span.add_event(sc.TOOL_STATUS_EVENT, {sc.ACP_TOOL_CALL_STATUS: status})

    def _note_terminals(self, turn: Turn, tool_call_id: str, update: dict[str, Any]) -> None:
        """Remember the terminals a tool call's content embeds: later ``terminal/*`` requests naming them serve it."""
        content = update.get("content")
        if type(content) is not list:
            return
        for item in content:
            if type(item) is dict and item.get("type") == sc.TERMINAL_CONTENT_TYPE:
                terminal_id = item.get("terminalId")
                if type(terminal_id) is str:
                    terminals = turn.terminals
                    if terminals is None:
                        terminals = turn.terminals = {}
                    if terminal_id in terminals or len(terminals) < MAX_TERMINALS:
                        terminals[terminal_id] = tool_call_id

    def _tool_name(self, tool: ToolCall | None, update: dict[str, Any], kind: str | None) -> tuple[str | None, int]:
        """The best name known for a tool call after ``update`` (``tool``: None when it opens with it), and its
        rank: the update's declared name, the first title (``tool_names_from_titles``), the kind."""
        name, rank = declared_tool_name(update)
        first_title = tool is None or not tool.titled
        if first_title:
            title = update.get("title")
            if type(title) is str:
                if tool is not None:
                    tool.titled = True
                if name is None and self._names_from_titles:
                    name = title_tool_name(title)
                    if name is not None:
                        rank = NAME_TITLE
        if name is None and kind is not None:
            return kind, NAME_KIND
        return name, rank

    def _rename_tool(self, tool: ToolCall, update: dict[str, Any]) -> None:
        """Name the open tool call's span after a better source than the one it has (or the kind it now has)."""
        name, rank = self._tool_name(tool, update, tool.kind)
        if name is None or rank > tool.name_rank:
            return
        name = name[:_MAX_NAME]
        if name == tool.name or (rank == tool.name_rank and rank != NAME_KIND):
            return  # the first name of a source stays; one from the kind follows the kind
        tool.name, tool.name_rank = name, rank
        span = tool.span
        if span.is_recording():
            span.update_name(f"{sc.EXECUTE_TOOL} {name}")
            span.set_attribute(sc.GEN_AI_TOOL_NAME, name)

    def _open_tool(self, turn: Turn, tool_call_id: str, update: dict[str, Any], status: str | None) -> ToolCall:
        kind = update.get("kind")
        if type(kind) is not str:
            kind = None
        label, rank = self._tool_name(None, update, kind)
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
            sc.GEN_AI_TOOL_CALL_ID: tool_call_id,
            sc.ACP_SESSION_ID: turn.session_id,
            sc.GEN_AI_CONVERSATION_ID: turn.session_id,
        }
        if type(turn.agent) is str:
            attributes[sc.GEN_AI_AGENT_NAME] = turn.agent
        if label is not None:
            label = label[:_MAX_NAME]
            attributes[sc.GEN_AI_TOOL_NAME] = label
        if kind is not None:
            attributes[sc.ACP_TOOL_CALL_KIND] = kind
        if status is not None:
            attributes[sc.ACP_TOOL_CALL_STATUS] = status
        span_name = f"{sc.EXECUTE_TOOL} {label}" if label else sc.EXECUTE_TOOL
        span = self._tracer.start_span(span_name, context=turn.context, kind=SpanKind.INTERNAL, attributes=attributes)
        if self._capture and span.is_recording():
            self._tool_content(span, update)
        tool = ToolCall(span, trace.set_span_in_context(span, turn.context), kind, None)
        tool.name, tool.name_rank = label, rank
        tool.titled = type(update.get("title")) is str
        turn.tools[tool_call_id] = tool
        return tool

    def _tool_content(self, span: Span, update: dict[str, Any]) -> None:
        for key, attribute in (
            ("title", sc.ACP_TOOL_CALL_TITLE),
            ("rawInput", sc.GEN_AI_TOOL_CALL_ARGUMENTS),
            ("rawOutput", sc.GEN_AI_TOOL_CALL_RESULT),
            ("locations", sc.ACP_TOOL_CALL_LOCATIONS),
        ):
            if key in update and update[key] is not None:
                span.set_attribute(attribute, truncate(update[key], self._max_len))

    def _end_tool(self, turn: Turn, tool_call_id: str, tool: ToolCall, ended_by: str | None) -> None:
        del turn.tools[tool_call_id]
        closed = turn.closed_tools
        if closed is None:
            turn.closed_tools = {tool_call_id}
        elif len(closed) < MAX_CLOSED_TOOLS:
            closed.add(tool_call_id)
        span = tool.span
        failed = tool.status == "failed"
        if span.is_recording():
            if update_count := tool.updates:
                span.set_attribute(sc.ACP_TOOL_CALL_UPDATE_COUNT, update_count)
            if ended_by is not None:  # never reached completed / failed: marked, not an error
                span.set_attribute(sc.ACP_TOOL_CALL_ENDED_BY, ended_by)
            if failed:
                span.set_attribute(sc.ERROR_TYPE, sc.TOOL_FAILED)
                span.set_status(Status(StatusCode.ERROR, "tool call failed"))
        span.end()
        instruments = self._instruments
        if instruments is not None and instruments.recording():
            attributes = instruments.tool_attributes(turn.agent, tool.kind, tool.status)
            instruments.tool_duration.record(time.monotonic() - tool.started, attributes)


def update_attributes(attributes: dict[str, Any], update: dict[str, Any]) -> None:
    """Add a session/update's kind and tool call id/status (no content) to ``attributes``."""
    kind = update.get("sessionUpdate")
    if type(kind) is str:
        attributes[sc.ACP_SESSION_UPDATE] = kind
    tool_call_id = update.get("toolCallId")
    if type(tool_call_id) is str:
        attributes[sc.ACP_TOOL_CALL_ID] = tool_call_id
        status = update.get("status")
        if type(status) is str:
            attributes[sc.ACP_TOOL_CALL_STATUS] = status


def agent_attributes(attributes: dict[str, Any], facts: dict[str, Any]) -> None:
    """Add gen_ai.agent.name / version from the connection's agentInfo facts."""
    name = facts.get(sc.ACP_AGENT_NAME)
    if name is not None:
        attributes[sc.GEN_AI_AGENT_NAME] = name
    version = facts.get(sc.ACP_AGENT_VERSION)
    if version is not None:
        attributes[sc.GEN_AI_AGENT_VERSION] = version
