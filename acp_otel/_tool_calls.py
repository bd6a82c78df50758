"""Tool calls: one ``execute_tool {name}`` span per ``toolCallId`` of a turn, named from the best source seen.

:class:`ToolCalls` opens a tool call's span on its first sighting (a ``tool_call`` / ``tool_call_update``
update, or the ``toolCall`` a ``session/request_permission`` names), follows its kind, name, status and
content, remembers the terminals its content embeds (``terminal/*`` requests naming them serve it) and ends
it at ``completed`` / ``failed`` or when its turn ends. The turn layer (:mod:`._turns`) calls it.
"""

from __future__ import annotations

import re
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import _semconv as sc
from ._agent_profiles import TITLE_WHOLE
from ._content import json_text, truncate
from ._metrics import Instruments
from ._settings import Settings
from ._turn_state import NAME_ACP, NAME_KIND, NAME_META, NAME_NONE, NAME_TITLE, ToolCall, Turn

# A hostile agent can invent endless tool call ids: at most this many open per turn, and this many
# finished ids remembered (so that an update after completed/failed does not open a second span).
MAX_OPEN_TOOLS = 256
MAX_CLOSED_TOOLS = 1024
_MAX_NAME = 128  # characters of a tool name kept in span names and attributes
MAX_TERMINALS = 256  # terminal ids remembered per turn (a hostile agent can invent endless ones)

_FINAL_STATUSES = frozenset(("completed", "failed"))

# Names from titles (the agent profile's tool_name_titles): a title that is a plain identifier, alone (whole) or
# alone or before a ':' (prefix: "ReadFile", "ReadFile: notes.txt"). Anything else (spaces, paths, arguments)
# names nothing: titles are content.
_TITLE_PREFIX = re.compile(r"[ \t]*([A-Za-z0-9_.\-]{1,64})[ \t]*(?::|\Z)")
_TITLE_WHOLE = re.compile(r"[ \t]*([A-Za-z0-9_.\-]{1,64})[ \t]*\Z")


def declared_tool_name(update: dict[str, Any], meta_paths: tuple[tuple[str, ...], ...]) -> tuple[str | None, int]:
    """The programmatic tool name an update declares and its rank: ACP's ``name``, else the first of the agent
    profile's ``_meta`` paths that holds one (Claude Code ``claudeCode.toolName``, Qwen Code ``toolName``);
    ``(None, NAME_NONE)`` if none."""
    name = update.get("name")
    if type(name) is str and name:
        return name, NAME_ACP
    meta = update.get("_meta")
    if type(meta) is dict:
        for path in meta_paths:
            value: Any = meta
            for key in path:
                value = value.get(key) if type(value) is dict else None
            if type(value) is str and value:
                return value, NAME_META
    return None, NAME_NONE


def title_tool_name(title: str, mode: str) -> str | None:
    """The tool name a title gives: the whole title when it is a plain identifier (``whole``), or its leading
    identifier when alone or followed by ``:`` (``prefix``: ``ReadFile``, ``ReadFile: notes.txt``); else ``None``."""
    match = (_TITLE_WHOLE if mode == TITLE_WHOLE else _TITLE_PREFIX).match(title)
    return match.group(1) if match is not None else None


def permission_tool_call(params: Any) -> Any:
    """The tool call update a session/request_permission carries (v1 ``toolCall``; v2 ``subject.toolCall``)."""
    if type(params) is not dict:
        return None
    tool_call = params.get("toolCall")
    if tool_call is None:
        subject = params.get("subject")
        tool_call = subject.get("toolCall") if type(subject) is dict else None
    return tool_call


class ToolCalls:
    """Opens, renames, annotates and ends the tool-call spans of turns; records the tool-call metric."""

    def __init__(self, tracer: trace.Tracer, settings: Settings, instruments: Instruments | None) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self._capture = settings.capture_content
        self._max_len = settings.capture_content_max_length
        self._max_events = settings.max_events_per_span

    def update(self, turn: Turn, update: dict[str, Any], make_tools: bool) -> Context | None:
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
            tool = self._open(turn, tool_call_id, update, status)
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
                self._rename(tool, update, turn)
            if self._capture:
                self._content(tool, update)
        if status is not None and status != tool.status:
            self._status(tool, status)
        if "content" in update:
            self._note_terminals(turn, tool_call_id, update)
        context = tool.context
        if status in _FINAL_STATUSES:
            self.end(turn, tool_call_id, tool, None)
        return context

    def sight(self, turn: Turn, tool_call: Any, make_tools: bool) -> Context | None:
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
        tool = self._open(turn, tool_call_id, tool_call, status)
        if status is not None:
            self._status(tool, status)  # not final here: the tool call's own updates end it
        if "content" in tool_call:
            self._note_terminals(turn, tool_call_id, tool_call)
        return tool.context

    def follow(self, turn: Turn, update: Any) -> str | None:
        """A tool call update (or a permission's ``toolCall``) of a tool call this side makes no span for, as the
        agent's own telemetry reports it: its id is kept among the turn's open ones (with the terminals its
        content embeds) until its final status, for the requests that serve it. Returns its id."""
        if type(update) is not dict:
            return None
        tool_call_id = update.get("toolCallId")
        if type(tool_call_id) is not str:
            return None
        unspanned = turn.unspanned
        if unspanned is None:
            unspanned = turn.unspanned = {}
        status = update.get("status")
        closed = turn.closed_tools
        if type(status) is str and status in _FINAL_STATUSES:
            unspanned.pop(tool_call_id, None)
            if closed is None:
                turn.closed_tools = {tool_call_id}
            elif len(closed) < MAX_CLOSED_TOOLS:
                closed.add(tool_call_id)
            return tool_call_id
        if (closed is None or tool_call_id not in closed) and len(unspanned) < MAX_OPEN_TOOLS:
            unspanned[tool_call_id] = None
        if "content" in update:
            self._note_terminals(turn, tool_call_id, update)
        return tool_call_id

    def _status(self, tool: ToolCall, status: str) -> None:
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

    def _name(
        self, tool: ToolCall | None, update: dict[str, Any], kind: str | None, turn: Turn
    ) -> tuple[str | None, int]:
        """The best name known for a tool call after ``update`` (``tool``: None when it opens with it), and its
        rank: the update's declared name, the first title (when the agent profile says names are there), the kind."""
        profile = turn.profile
        name, rank = declared_tool_name(update, profile.tool_name_meta)
        first_title = tool is None or not tool.titled
        if first_title:
            title = update.get("title")
            if type(title) is str:
                if tool is not None:
                    tool.titled = True
                titles = profile.tool_name_titles
                if name is None and titles is not None:
                    name = title_tool_name(title, titles)
                    if name is not None:
                        rank = NAME_TITLE
        if name is None and kind is not None:
            return kind, NAME_KIND
        return name, rank

    def _rename(self, tool: ToolCall, update: dict[str, Any], turn: Turn) -> None:
        """Name the open tool call's span after a better source than the one it has (or the kind it now has)."""
        name, rank = self._name(tool, update, tool.kind, turn)
        if name is None or rank > tool.name_rank:
            return
        name = name[:_MAX_NAME]
        if name == tool.name or (rank == tool.name_rank and rank != NAME_KIND):
            return  # the first name of a source stays; one from the kind follows the kind
        tool.name, tool.name_rank = name, rank
        span = tool.span
        if span.is_recording():
            span.update_name(f"{sc.EXECUTE_TOOL} {name}")
            span.set_attributes({sc.GEN_AI_TOOL_NAME: name, sc.ACP_TOOL_CALL_NAME_SOURCE: sc.TOOL_NAME_SOURCES[rank]})

    def _open(self, turn: Turn, tool_call_id: str, update: dict[str, Any], status: str | None) -> ToolCall:
        kind = update.get("kind")
        if type(kind) is not str:
            kind = None
        label, rank = self._name(None, update, kind, turn)
        attributes: dict[str, Any] = {
            sc.GEN_AI_OPERATION_NAME: sc.EXECUTE_TOOL,
            sc.GEN_AI_TOOL_CALL_ID: tool_call_id,
            sc.GEN_AI_CONVERSATION_ID: turn.session_id,
        }
        if type(turn.agent) is str:
            attributes[sc.GEN_AI_AGENT_NAME] = turn.agent
        if label is not None:
            label = label[:_MAX_NAME]
            attributes[sc.GEN_AI_TOOL_NAME] = label
            attributes[sc.ACP_TOOL_CALL_NAME_SOURCE] = sc.TOOL_NAME_SOURCES[rank]
        if kind is not None:
            attributes[sc.ACP_TOOL_CALL_KIND] = kind
        if status is not None:
            attributes[sc.ACP_TOOL_CALL_STATUS] = status
        span_name = f"{sc.EXECUTE_TOOL} {label}" if label else sc.EXECUTE_TOOL
        span = self._tracer.start_span(span_name, context=turn.context, kind=SpanKind.INTERNAL, attributes=attributes)
        tool = ToolCall(span, trace.set_span_in_context(span, turn.context), kind, None)
        if self._capture and span.is_recording():
            self._content(tool, update)
        tool.name, tool.name_rank = label, rank
        tool.titled = type(update.get("title")) is str
        turn.tools[tool_call_id] = tool
        return tool

    def _content(self, tool: ToolCall, update: dict[str, Any]) -> None:
        """Title, arguments and locations as they come (capture_content); the result is kept for the end: the
        conventions record it only for a call that succeeded. Arguments and result stay valid JSON."""
        span = tool.span
        for key, attribute in (("title", sc.ACP_TOOL_CALL_TITLE), ("locations", sc.ACP_TOOL_CALL_LOCATIONS)):
            if key in update and update[key] is not None:
                span.set_attribute(attribute, truncate(update[key], self._max_len))
        raw_input = update.get("rawInput")
        if raw_input is not None:
            span.set_attribute(sc.GEN_AI_TOOL_CALL_ARGUMENTS, json_text(raw_input, self._max_len))
        raw_output = update.get("rawOutput")
        if raw_output is not None:
            tool.result = raw_output

    def end(self, turn: Turn, tool_call_id: str, tool: ToolCall, ended_by: str | None) -> None:
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
            if tool.result is not None and tool.status == "completed":
                span.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, json_text(tool.result, self._max_len))
            if failed:
                span.set_attribute(sc.ERROR_TYPE, sc.TOOL_FAILED)
                span.set_status(Status(StatusCode.ERROR, "tool call failed"))
        span.end()
        instruments = self._instruments
        if instruments is not None and instruments.recording():
            attributes = instruments.tool_attributes(turn.agent, tool.name, tool.kind, tool.status)
            instruments.tool_duration.record(time.monotonic() - tool.started, attributes)

    def end_all(self, turn: Turn, ended_by: str) -> None:
        """End the turn's open tool calls, marked ``acp.tool_call.ended_by = ended_by`` (not an error)."""
        for tool_call_id, tool in list(turn.tools.items()):
            self.end(turn, tool_call_id, tool, ended_by)
