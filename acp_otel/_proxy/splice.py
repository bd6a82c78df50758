"""Write trace keys into ``params._meta`` of a raw JSON-RPC line, keeping every other character.

The proxy must not re-serialise a message: key order, spacing, number spelling, escapes and
duplicate keys all reach the peer exactly as the sender wrote them. So the line is walked member by
member, at the three levels that matter (the message, ``params``, ``_meta``), to find where values
start and end, and only the trace values are replaced or inserted there.

No JSON library reports value positions, but the standard decoder's ``raw_decode(text, index)``
returns the end index of the value that starts at ``index`` (in C), so this module only tracks the
structure around it: whitespace, ``:``, ``,`` and braces. Callers pass text that ``json.loads``
accepted, so the walk may assume valid JSON. Duplicate keys resolve as ``json.loads`` does (the last
one wins); every occurrence of a trace key in the effective ``_meta`` is rewritten.
"""

from __future__ import annotations

import json
import re

TYPE_CHECKING = False  # not typing's: the proxy relays its first lines with this module before anything heavy
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"
_WHITESPACE_RUN = re.compile(r"[ \t\n\r]*")


class _Member:
    """One member of a JSON object: its key, where its value starts and ends in the text, and the value."""

    __slots__ = ("key", "value", "value_end", "value_start")

    def __init__(self, key: str, value_start: int, value_end: int, value: Any) -> None:
        self.key = key
        self.value_start = value_start
        self.value_end = value_end
        self.value = value


class SpliceError(ValueError):
    """The line does not have the shape the splice needs (never raised for what ``json.loads`` accepts)."""


def _skip_ws(text: str, pos: int) -> int:
    if pos < len(text) and text[pos] in _WHITESPACE:  # most JSON on the wire is compact
        return _WHITESPACE_RUN.match(text, pos).end()  # type: ignore[union-attr]  # "*" always matches
    return pos


def _members(text: str, open_pos: int) -> tuple[list[_Member], int]:
    """The members of the object whose ``{`` is at ``open_pos``, and the position of its ``}``."""
    if text[open_pos] != "{":
        raise SpliceError("not an object")
    members: list[_Member] = []
    pos = _skip_ws(text, open_pos + 1)
    if text[pos] == "}":
        return members, pos
    while True:
        key, pos = _DECODER.raw_decode(text, pos)
        pos = _skip_ws(text, pos)
        if text[pos] != ":":
            raise SpliceError("expected ':'")
        value_start = _skip_ws(text, pos + 1)
        value, pos = _DECODER.raw_decode(text, value_start)
        members.append(_Member(key, value_start, pos, value))
        pos = _skip_ws(text, pos)
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        elif text[pos] == "}":
            return members, pos
        else:
            raise SpliceError("expected ',' or '}'")


def _last(members: list[_Member], key: str) -> _Member | None:
    found: _Member | None = None
    for member in members:
        if member.key == key:
            found = member  # the last one wins, as in json.loads
    return found


def _pairs(values: Mapping[str, str]) -> str:
    return ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in values.items())


def _append_at(members: list[_Member], open_pos: int, body: str) -> tuple[int, int, str]:
    """An edit that adds ``body`` (``"k":v,...``) as the object's last members."""
    if members:
        return members[-1].value_end, members[-1].value_end, "," + body
    return open_pos + 1, open_pos + 1, body


def splice_meta(text: str, values: Mapping[str, str]) -> str:
    """``text`` with ``params._meta[key] = value`` for every item of ``values``.

    Missing ``params`` (or ``null``) and a missing ``_meta`` are created, as the engine's own injection
    does; keys are appended after the existing members. Raises :class:`SpliceError` when ``params`` or
    ``_meta`` is neither an object nor absent (the engine does not inject into those).
    """
    if not values:
        return text
    top_open = _skip_ws(text, 0)
    top, _ = _members(text, top_open)
    params = _last(top, "params")
    edits: list[tuple[int, int, str]] = []
    meta_object = "{" + _pairs(values) + "}"
    if params is None:
        edits.append(_append_at(top, top_open, f'"params":{{"_meta":{meta_object}}}'))
    elif params.value is None:
        edits.append((params.value_start, params.value_end, f'{{"_meta":{meta_object}}}'))
    elif type(params.value) is dict:
        inner, _ = _members(text, params.value_start)
        meta = _last(inner, "_meta")
        if meta is None:
            edits.append(_append_at(inner, params.value_start, f'"_meta":{meta_object}'))
        elif meta.value is None:
            edits.append((meta.value_start, meta.value_end, meta_object))
        elif type(meta.value) is dict:
            meta_members, _ = _members(text, meta.value_start)
            missing = dict(values)
            for member in meta_members:
                if member.key in values:
                    missing.pop(member.key, None)
                    edits.append((member.value_start, member.value_end, json.dumps(values[member.key])))
            if missing:
                edits.append(_append_at(meta_members, meta.value_start, _pairs(missing)))
        else:
            raise SpliceError("_meta is not an object")
    else:
        raise SpliceError("params is not an object")
    # Apply from the end so earlier positions stay valid (the edits never overlap).
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text
