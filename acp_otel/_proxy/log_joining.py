"""The agent's log records with their spans, whatever the order they arrive in (docs/proxy.md).

A record that names a span follows that span's fate (its new trace id; a left-out span's nearest forwarded
ancestor). A record naming a span not decided yet (not seen, or held for its parent) waits for it, at most
:data:`HOLD_S` and at most :data:`MAX_HELD` records (then it goes as it came), and everything waiting goes at the
agent's exit: agents export their logs and their spans on timers of their own (Gemini CLI its logs first). A record
without a span gets the context of the one turn open at its time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from .proto_spans import Entry, Key, append_logs
from .span_fates import LINKED, Fates
from .span_filter import SpanFilter
from .turn_windows import TurnWindows

HOLD_S = 60.0
"""How long a log record waits for the span it names: a span is exported when it ends, and a log record written at
the start of a long model call or turn arrives that much earlier (a record naming a span the agent never exports
arrives this much late)."""
MAX_HELD = 4096
"""Log records waiting at once; past this the oldest goes as it came."""


class LogJoining:
    """Joins log records (not thread-safe: the joiner's lock guards it)."""

    def __init__(
        self,
        windows: TurnWindows,
        fates: Fates,
        span_filter: SpanFilter,
        clock: Callable[[], float],
        hold_s: float = HOLD_S,
        max_held: int = MAX_HELD,
    ) -> None:
        self._windows = windows
        self._fates = fates
        self._filter = span_filter
        self._clock = clock
        self._hold_s = hold_s
        self._max_held = max_held
        self._waiting: OrderedDict[int, tuple[float, Key, Entry]] = OrderedDict()  # by arrival
        self._next = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def join(self, request: ExportLogsServiceRequest) -> None:
        """Join one request's records in place; those naming a span not seen yet are taken out to wait."""
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                waiting = []
                for record in scope_logs.log_records:
                    if record.trace_id and record.span_id:
                        key = (record.trace_id, record.span_id)
                        if key in self._fates:
                            self._follow(record, key)
                        else:
                            waiting.append(record)
                            entry = Entry.copied(
                                record,
                                resource_logs.resource,
                                resource_logs.schema_url,
                                scope_logs.scope,
                                scope_logs.schema_url,
                            )
                            self._waiting[self._next] = (self._clock() + self._hold_s, key, entry)
                            self._next += 1
                    elif not record.trace_id:
                        at = record.time_unix_nano or record.observed_time_unix_nano
                        window = self._windows.only_at(at)
                        if window is not None:
                            record.trace_id = window.trace_id
                            record.span_id = window.span_id
                if waiting:
                    kept = [r for r in scope_logs.log_records if not any(r is w for w in waiting)]
                    del scope_logs.log_records[:]
                    scope_logs.log_records.extend(kept)
        self._filter.repoint_logs(request)

    def ready(self, everything: bool = False) -> ExportLogsServiceRequest | None:
        """The waiting records whose span has come (joined), whose bound is past, or past :data:`MAX_HELD` (as
        they came); all of them when ``everything``."""
        now = self._clock()
        out: list[Entry] = []
        over = len(self._waiting) - self._max_held
        for number, (deadline, key, entry) in list(self._waiting.items()):
            if key in self._fates:
                self._follow(entry.span, key)
            elif not (everything or deadline <= now or over > 0):
                continue
            over -= 1
            del self._waiting[number]
            out.append(entry)
        if not out:
            return None
        request = ExportLogsServiceRequest()
        append_logs(request, out)
        self._filter.repoint_logs(request)
        return request

    def _follow(self, record: Any, key: Key) -> None:
        """``record`` names the decided span ``key``: its new trace id."""
        fate = self._fates.get(key)
        if fate and fate != LINKED:
            record.trace_id = fate
