"""What the agent's own spans prove it reports (its tool calls, its token usage), told to the engine once, and
where its tool spans went, for the proxy's spans that serve a tool call (docs/proxy.md, "Each fact once")."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from .proto_spans import attribute, spans, string_attribute

MAX_KNOWN_TOOLS = 4096
"""The agent's tool spans remembered (for the proxy's own spans that serve their tool calls)."""
TOOL_CALL_ID = "gen_ai.tool.call.id"
EXECUTE_TOOL = "execute_tool"
USAGE_PREFIX = "gen_ai.usage."


def is_tool_report(span: Any) -> bool:
    """``span`` reports a tool call as the conventions say: an ``execute_tool`` operation with its call id."""
    operation = string_attribute(span, "gen_ai.operation.name")
    return operation == EXECUTE_TOOL and attribute(span, (TOOL_CALL_ID,)) is not None


class AgentFacts:
    """The facts seen and the tool spans noted (not thread-safe: the joiner's lock guards it, except
    :meth:`tell_tools`, called outside it)."""

    def __init__(self, tool_call_keys: Iterable[str], on_facts: Callable[[bool, bool], None] | None) -> None:
        self._tool_keys = tuple(dict.fromkeys((*tool_call_keys, TOOL_CALL_ID)))
        self._on_facts = on_facts
        self._seen_tools = False
        self._seen_usage = False
        # The agent's tool spans as decided: (trace id, tool call id) -> span id (see tool_span).
        self._tool_spans: OrderedDict[tuple[bytes, str], bytes] = OrderedDict()
        self.on_tool_span: Callable[[], None] | None = None  # called (under no lock of ours) when one is noted
        # The proxy's execute_tool span of a tool call in a trace, if it made one (see under_proxy_tool).
        self.proxy_tool_span: Callable[[bytes, str], bytes | None] | None = None
        self._calls: OrderedDict[tuple[bytes, bytes], str] = OrderedDict()  # the agent's spans of tool calls
        self._noted = False

    def note_request(self, request: Any) -> None:
        """Tell the engine (once each) that the agent reports its tool calls / its usage, if ``request`` shows it as
        the conventions say (after the profile's span maps): an ``execute_tool`` span with ``gen_ai.tool.call.id``;
        ``gen_ai.usage.*`` on a span."""
        if self._on_facts is None or (self._seen_tools and self._seen_usage):
            return
        tools = usage = False
        for span in spans(request):
            if any(kv.key.startswith(USAGE_PREFIX) for kv in span.attributes):
                usage = True
            if is_tool_report(span):
                tools = True
        tools, usage = tools and not self._seen_tools, usage and not self._seen_usage
        if tools or usage:
            self._seen_tools |= tools
            self._seen_usage |= usage
            try:
                self._on_facts(tools, usage)
            except Exception:  # the engine's side: never the receiver's problem
                pass

    def note_tool(self, span: Any) -> None:
        """A joined span: if it is an ``execute_tool`` span naming a tool call (one of the tool call id keys),
        remember where it went, for :meth:`tool_span` (only those: other spans of the agent's may be left out of
        what is forwarded); if it is another span naming a tool call the proxy made a span of, hang it under that
        span (:meth:`under_proxy_tool`)."""
        tool_call_id = attribute(span, self._tool_keys)
        if tool_call_id is None:
            return
        if string_attribute(span, "gen_ai.operation.name") != EXECUTE_TOOL:
            self.under_proxy_tool(span, tool_call_id)
            return
        key = (span.trace_id, tool_call_id)
        if key not in self._tool_spans:
            self._tool_spans[key] = span.span_id
            self._noted = True
            if len(self._tool_spans) > MAX_KNOWN_TOOLS:
                self._tool_spans.popitem(last=False)

    def under_proxy_tool(self, span: Any, tool_call_id: str) -> None:
        """The agent's span of a tool call the proxy reports hangs under the proxy's ``execute_tool`` span of it,
        unless its parent is a span of that tool call already (the topmost of the call's spans moves)."""
        lookup = self.proxy_tool_span
        proxy_span = lookup(span.trace_id, tool_call_id) if lookup is not None else None
        key = (span.trace_id, span.span_id)
        self._calls[key] = tool_call_id
        if len(self._calls) > MAX_KNOWN_TOOLS:
            self._calls.popitem(last=False)
        if proxy_span is not None and self._calls.get((span.trace_id, span.parent_span_id)) != tool_call_id:
            span.parent_span_id = proxy_span

    def tool_span(self, trace_id: bytes, tool_call_id: str) -> bytes | None:
        """The id of the agent's ``execute_tool`` span of ``tool_call_id`` in trace ``trace_id``, if one was seen."""
        return self._tool_spans.get((trace_id, tool_call_id))

    def tell_tools(self) -> None:
        """Call :attr:`on_tool_span` if a tool span was noted since the last call."""
        if self._noted:
            self._noted = False
            callback = self.on_tool_span
            if callback is not None:
                try:
                    callback()
                except Exception:  # the proxy's side: never the receiver's problem
                    pass
