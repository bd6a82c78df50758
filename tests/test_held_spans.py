"""Children exported before their parents (``acp_otel._proxy.held_spans``): held until their parent's fate is known,
past their bound, past the number held at once, with siblings, duplicates and cycles of parents."""

from __future__ import annotations

from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from acp_otel._proxy.held_spans import HeldSpans
from acp_otel._proxy.proto_spans import Entry, Key

TRACE = b"\x01" * 16
TURN = b"\x0a" * 16


def _id(name: str) -> bytes:
    return name.encode().ljust(8, b"_")


def _key(name: str) -> Key:
    return (TRACE, _id(name))


class _Joiner:
    """What the joiner does with a decided span: remembers its fate (the parent's, else its own trace's)."""

    def __init__(self, max_held: int = 100) -> None:
        self.fates: dict[Key, bytes] = {}
        self.decided: list[tuple[str, bytes | None]] = []
        self.held = HeldSpans(self._decide, self.fates.get, max_held)

    def _decide(self, key: Key, entry: Entry, parent: bytes | None) -> None:
        self.decided.append((entry.span.name, parent))
        self.fates[key] = parent or TRACE

    def hold(self, name: str, parent: str, deadline: float) -> None:
        span = Span(name=name, trace_id=TRACE, span_id=_id(name), parent_span_id=_id(parent))
        self.held.hold(_key(name), Entry(span, Resource(), "", InstrumentationScope(), ""), deadline)


def _names(entries: list[Entry]) -> list[str]:
    return [e.span.name for e in entries]


def test_a_subtree_goes_when_its_topmost_span_s_bound_is_past() -> None:
    j = _Joiner()
    j.hold("a", "p", 10.0)
    j.hold("b", "a", 5.0)  # its own bound is earlier, but it goes with its parent
    j.hold("c", "q", 20.0)
    held = j.held.get(_key("a"))
    assert held is not None and held.deadline == 10.0 and held.parent == _key("p")
    assert _key("c") in j.held and _key("p") not in j.held
    assert j.held.due(9.0, everything=False) == []
    assert _names(j.held.due(10.0, everything=False)) == ["a", "b"]
    assert j.decided == [("a", None), ("b", TRACE)]
    assert len(j.held) == 1 and _key("c") in j.held
    assert _names(j.held.due(0.0, everything=True)) == ["c"]
    assert len(j.held) == 0 and not j.held._waiting  # nothing left behind


def test_children_are_decided_with_their_parent_s_fate_siblings_and_duplicates_included() -> None:
    j = _Joiner()
    j.hold("a", "p", 10.0)
    j.hold("a", "p", 10.0)  # exported twice
    j.hold("s", "p", 10.0)
    j.hold("x", "a", 10.0)
    assert _names(j.held.settled(_key("p"))) == ["a", "s", "x"]  # p's fate unknown: decided as with no fate
    assert j.decided == [("a", b""), ("s", b""), ("x", TRACE)]
    j = _Joiner()
    j.hold("a", "p", 10.0)
    j.hold("s", "p", 10.0)
    assert _names(j.held.give_up(_key("a"))) == ["a"]
    j.fates[_key("p")] = TURN
    assert _names(j.held.settled(_key("p"))) == ["s"]  # the sibling still waited for p
    assert j.decided == [("a", None), ("s", TURN)]
    assert len(j.held) == 0 and not j.held._waiting


def test_past_the_number_held_the_oldest_subtrees_go_first() -> None:
    j = _Joiner(max_held=2)
    j.hold("b", "a", 10.0)  # a child before its parent
    j.hold("a", "p", 10.0)
    assert j.held.overflow() == []  # at the bound, nothing goes
    j.hold("c", "q", 10.0)
    assert _names(j.held.overflow()) == ["a", "b"]
    assert len(j.held) == 1 and _key("c") in j.held
    j = _Joiner(max_held=1)
    for name in ("d", "e", "f"):
        j.hold(name, "p", 10.0)
    assert _names(j.held.overflow()) == ["d", "e"]
    assert _key("f") in j.held


def test_a_cycle_of_parents_goes_out_as_it_is() -> None:
    j = _Joiner(max_held=1)
    j.hold("x", "y", 10.0)
    j.hold("y", "x", 10.0)
    assert _names(j.held.overflow()) == ["x", "y"]
    j = _Joiner()
    j.hold("x", "y", 10.0)
    j.hold("y", "x", 10.0)
    assert j.held.due(0.0, everything=False) == []
    assert sorted(_names(j.held.due(0.0, everything=True))) == ["x", "y"]
    assert len(j.held) == 0
