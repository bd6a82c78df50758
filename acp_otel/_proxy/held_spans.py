"""Children exported before their parents: the spans held until their parent's fate is known (docs/proxy.md).

A held span waits for at most its hold bound, and at most so many wait at once (then the oldest subtrees go, as if
their topmost span had no parent). The joiner decides; this module only keeps who waits for whom.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from .proto_spans import Entry, Key

Decide = Callable[[Key, Entry, "bytes | None"], None]
"""``decide(key, entry, parent_fate)``: apply the joining rule to a span whose parent's fate is now known (``None``: it
never came)."""


class Held:
    """One held span and until when it waits."""

    __slots__ = ("deadline", "entry", "parent")

    def __init__(self, entry: Entry, deadline: float) -> None:
        self.entry = entry
        self.deadline = deadline
        span = entry.span
        self.parent: Key = (span.trace_id, span.parent_span_id)


class HeldSpans:
    """Held spans by key, and who waits on whom (not thread-safe: the joiner's lock guards it)."""

    def __init__(self, decide: Decide, fate_of: Callable[[Key], bytes | None], max_held: int) -> None:
        self._decide = decide
        self._fate_of = fate_of
        self.max_held = max_held
        self._held: OrderedDict[Key, Held] = OrderedDict()
        self._waiting: dict[Key, list[Key]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: Key) -> bool:
        return key in self._held

    def get(self, key: Key) -> Held | None:
        return self._held.get(key)

    def hold(self, key: Key, entry: Entry, deadline: float) -> None:
        """Hold a copy of ``entry`` until its parent is decided or ``deadline``."""
        held = Held(Entry.copied(entry.span, entry.resource, entry.schema, entry.scope, entry.scope_schema), deadline)
        self._held[key] = held
        self._waiting.setdefault(held.parent, []).append(key)

    def settled(self, key: Key) -> list[Entry]:
        """``key`` is decided: its held children are decided in turn (returned, to be sent)."""
        out: list[Entry] = []
        stack = [key]
        while stack:
            parent = stack.pop()
            fate = self._fate_of(parent)
            for child_key in self._waiting.pop(parent, ()):
                held = self._held.pop(child_key, None)
                if held is None:
                    continue
                self._decide(child_key, held.entry, fate if fate is not None else b"")
                out.append(held.entry)
                stack.append(child_key)
        return out

    def give_up(self, key: Key) -> list[Entry]:
        """The parent of held ``key`` never came: ``key`` is decided as if it had none (with what waits on it)."""
        held = self._held.pop(key)
        waiting = self._waiting.get(held.parent)
        if waiting is not None:
            if key in waiting:
                waiting.remove(key)
            if not waiting:
                del self._waiting[held.parent]
        self._decide(key, held.entry, None)
        return [held.entry, *self.settled(key)]

    def due(self, now: float, everything: bool) -> list[Entry]:
        """The subtrees whose topmost span's bound is past (all of them when ``everything``), decided."""
        out: list[Entry] = []
        for key in self._roots():
            held = self._held.get(key)
            if held is not None and (everything or held.deadline <= now):
                out.extend(self.give_up(key))
        while everything and self._held:  # a cycle of parents (hostile input): out as they are
            out.extend(self.give_up(next(iter(self._held))))
        return out

    def overflow(self) -> list[Entry]:
        """Past :attr:`max_held`: the oldest subtrees, decided."""
        out: list[Entry] = []
        while len(self._held) > self.max_held:
            roots = self._roots() or [next(iter(self._held))]  # (none: a cycle of parents)
            for key in roots:  # oldest first, each with what hangs from it
                if len(self._held) <= self.max_held:
                    break
                if key in self._held:
                    out.extend(self.give_up(key))
        return out

    def _roots(self) -> list[Key]:
        """Held spans whose parent is not held itself, oldest first (the others go with them)."""
        return [key for key, held in self._held.items() if held.parent not in self._held]
