"""What a turn keeps of its updates and says as it ends, in process (``acp_otel._turn_updates``,
``acp_otel._turn_summary``): the event cap and its count of dropped updates, a v2 state on its event, the captured
text's bounds, and the finish reason of a stop reason the conventions do not map."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider

from acp_otel import _semconv as sc
from acp_otel._settings import load_settings
from acp_otel._turn_state import Turn
from acp_otel._turn_summary import end_attributes
from acp_otel._turn_updates import TurnEvents

TRACER = TracerProvider().get_tracer("test")


def _turn() -> Turn:
    return Turn(TRACER.start_span("turn"), Context(), "sess-1", True, "agent")


def _events(**options: Any) -> TurnEvents:
    return TurnEvents(load_settings(options, environ={}))


def test_updates_past_the_cap_are_counted_as_dropped_each() -> None:
    events, turn = _events(max_events_per_span=2), _turn()
    for _ in range(5):
        events.add(turn, {"sessionUpdate": "plan"}, None)
    assert (turn.events, turn.dropped) == (2, 3)
    assert len(turn.span.events) == 2


def test_an_update_event_carries_its_kind_and_a_v2_state_and_no_params_without_capture() -> None:
    events, turn = _events(), _turn()
    events.add(turn, {"sessionUpdate": "state_update", "state": "idle"}, {"secret": "x"})
    events.add(turn, {"sessionUpdate": "plan", "state": 3}, None)
    first, second = (dict(e.attributes or {}) for e in turn.span.events)
    assert first == {sc.ACP_SESSION_UPDATE: "state_update", sc.ACP_TURN_STATE: "idle"}
    assert second == {sc.ACP_SESSION_UPDATE: "plan"}  # a state that is not a string is left out


def _kept(events: TurnEvents, *blocks: Any) -> tuple[list[str], int]:
    turn = _turn()
    turn.output = []
    for block in blocks:
        events.keep_text(turn, {"sessionUpdate": "agent_message_chunk", "content": block})
    return turn.output, turn.output_len


def test_the_captured_text_stops_at_the_max_length_in_all() -> None:
    events = _events(capture_content=True, capture_content_max_length=7)
    text = {"type": "text", "text": "abc"}
    assert _kept(events, text, text, text, text) == (["abc", "abc", "a"], 7)
    events = _events(capture_content=True, capture_content_max_length=4)
    assert _kept(events, text, text) == (["abc", "a"], 4)  # one character of room is still room


@pytest.mark.parametrize(
    "block",
    [
        {"type": "image", "text": "not a text block"},
        {"type": "text", "text": ""},
        {"type": "text", "text": 5},
        {"type": "text"},
        "a string, not a block",
        None,
    ],
)
def test_only_the_text_of_text_blocks_is_captured(block: Any) -> None:
    events = _events(capture_content=True, capture_content_max_length=10)
    assert _kept(events, block) == ([], 0)


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [("end_turn", "stop"), ("max_tokens", "length"), ("refusal", "content_filter"), ("cancelled", "cancelled")],
)
def test_a_stop_reason_the_conventions_do_not_map_is_its_own_finish_reason(
    stop_reason: str, finish_reason: str
) -> None:
    turn = _turn()
    turn.stop_reason = stop_reason
    assert end_attributes(turn, None, 100)[sc.GEN_AI_RESPONSE_FINISH_REASONS] == (finish_reason,)
