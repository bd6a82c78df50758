"""What a turn keeps of its ``session/update`` messages besides their counts: an event per update (kind, tool
call id and status; the params only with ``capture_content``) and, with ``capture_content``, the agent's text.

Plain ACP dicts; the turn layer (:mod:`._turns`) calls :class:`TurnEvents` per update, in the modes that keep
them.
"""

from __future__ import annotations

from typing import Any

from . import _semconv as sc
from ._content import truncate
from ._settings import Settings
from ._turn_state import Turn


class TurnEvents:
    """The updates a turn keeps as events, and the agent's text it keeps (both per the settings)."""

    def __init__(self, settings: Settings) -> None:
        self._capture = settings.capture_content
        self._max_len = settings.capture_content_max_length
        self._max_events = settings.max_events_per_span

    def keep_text(self, turn: Turn, update: dict[str, Any]) -> None:
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

    def add(self, turn: Turn, update: dict[str, Any], params: Any) -> None:
        """A ``session/update`` event on the turn's span (counted as dropped past ``max_events_per_span``)."""
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
