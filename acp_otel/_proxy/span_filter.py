"""Only what a user reads of the agent's spans (``--agent-telemetry-spans genai``, the default; docs/proxy.md).

Forwarded: the agent's model calls, tool calls and agent invocations (the GenAI conventions' operations, after
the profile's span maps), the HTTP client spans inside them, and the ancestors of all these; every other span is
left out, and a forwarded span whose parent was left out hangs from its nearest forwarded ancestor, so nothing
dangles. Works on joined spans (their ids as forwarded). The joiner hands a turn's subtree out together (children
are held until their parent is decided), so a span's ancestors are mostly in its own request; an ancestor that
comes later is forwarded when it comes; one left out by an earlier request stays out (its children skip it). An
HTTP client span whose ancestors have not all come may be inside a model call that ends later: it is forwarded.
Log records that name a left-out span name its nearest forwarded ancestor instead.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from .proto_spans import Key, remove, spans, string_attribute

MODEL_CALLS = frozenset({"chat", "generate_content", "text_completion", "embeddings"})
TOOL_CALLS = frozenset({"execute_tool"})
AGENT_INVOCATIONS = frozenset({"invoke_agent", "create_agent", "invoke_workflow"})
READ = MODEL_CALLS | TOOL_CALLS | AGENT_INVOCATIONS
MAX_KNOWN = 50_000
"""Spans remembered (left out: for their children and logs; forwarded: whether they are inside a model call, a tool
call or an agent invocation); the oldest are forgotten first."""
_CLIENT = 3  # Span.SpanKind.SPAN_KIND_CLIENT
_HTTP_METHOD_KEYS = ("http.request.method", "http.method")


def is_read(span: Any) -> bool:
    """A model call, a tool call or an agent invocation, as the conventions name them."""
    return string_attribute(span, "gen_ai.operation.name") in READ


def is_http_client(span: Any) -> bool:
    return span.kind == _CLIENT and any(kv.key in _HTTP_METHOD_KEYS for kv in span.attributes)


class SpanFilter:
    """Leaves out what a user does not read (``everything``: nothing). Not thread-safe: the joiner's lock guards
    it."""

    def __init__(self, everything: bool = False, is_turn: Callable[[Key], bool] = lambda key: False) -> None:
        """``is_turn(key)``: the span is one of the proxy's turn spans (the top of a turn: no read span above)."""
        self.everything = everything
        self._is_turn = is_turn
        # Every span seen, by its forwarded ids: (its parent, read, forwarded).
        self._known: OrderedDict[Key, tuple[Key, bool, bool]] = OrderedDict()
        self._needed: OrderedDict[Key, None] = OrderedDict()  # ancestors of forwarded spans, not seen yet
        self.left_out = 0
        self.forwarded = 0

    def filter(self, request: Any) -> None:
        """Take the spans a user does not read out of an ``ExportTraceServiceRequest`` (in place), re-parenting
        the others past them."""
        if self.everything:
            return
        batch: dict[Key, Any] = {(s.trace_id, s.span_id): s for s in spans(request)}
        for key, span in batch.items():
            self._remember(key, (span.trace_id, span.parent_span_id), is_read(span), False)
        kept: set[Key] = set()
        for key, span in batch.items():
            if is_read(span) or key in self._needed or (is_http_client(span) and self._inside_read(key)):
                self._keep_with_ancestors(key, batch, kept)
        for key in kept:
            self._needed.pop(key, None)
            span = batch[key]
            if span.parent_span_id:
                parent = self._forwarded_ancestor((span.trace_id, span.parent_span_id))
                span.parent_span_id = parent[1]
                if parent[1] and parent not in self._known:  # an ancestor yet to come: forwarded when it does
                    self._needed[parent] = None
                    if len(self._needed) > MAX_KNOWN:
                        self._needed.popitem(last=False)
        out = set(batch) - kept
        self.left_out += len(out)
        self.forwarded += len(kept)
        remove(request, out)

    def repoint_logs(self, request: Any) -> None:
        """Log records of an ``ExportLogsServiceRequest`` that name a left-out span name its nearest forwarded
        ancestor (none: no span)."""
        if self.everything:
            return
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                for record in scope_logs.log_records:
                    if record.span_id:
                        record.span_id = self._forwarded_ancestor((record.trace_id, record.span_id))[1]

    def _keep_with_ancestors(self, key: Key, batch: dict[Key, Any], kept: set[Key]) -> None:
        while key not in kept:
            span = batch.get(key)
            if span is None:
                return
            kept.add(key)
            parent = (span.trace_id, span.parent_span_id)
            self._known[key] = (parent, is_read(span), True)
            if not span.parent_span_id:
                return
            key = parent

    def _inside_read(self, key: Key) -> bool:
        """Whether an ancestor of ``key`` is a read span (of this request, or seen before), or may be: its
        nearest ancestor seen has a parent not seen yet (a model call ends after its HTTP calls)."""
        seen: set[Key] = set()
        known = self._known.get(key)
        while known is not None and key not in seen:
            seen.add(key)
            key = known[0]
            if not key[1] or self._is_turn(key):
                return False
            known = self._known.get(key)
            if known is None or known[1]:
                return True
        return False

    def _forwarded_ancestor(self, key: Key) -> Key:
        """``key`` if it is forwarded (or unknown), else its nearest forwarded (or unknown) ancestor; its span id
        empty when there is none."""
        seen: set[Key] = set()
        while key[1] and key not in seen:
            known = self._known.get(key)
            if known is None or known[2]:
                return key
            seen.add(key)
            key = known[0]
        return (key[0], b"")

    def _remember(self, key: Key, parent: Key, read: bool, forwarded: bool) -> None:
        self._known[key] = (parent, read, forwarded)
        if len(self._known) > MAX_KNOWN:
            self._known.popitem(last=False)
