"""What a turn says when it ends, once per turn: its span's end attributes and its metrics.

The turn layer (:meth:`._turns.TurnLayer.end`) calls these; the side closest to the agent (the one that reports
usage) records the agent-side metrics, so that each turn is counted once across the processes that see it.
"""

from __future__ import annotations

from typing import Any

from . import _content as content
from . import _semconv as sc
from ._metrics import Instruments
from ._turn_state import Turn
from ._usage import record_usage, usage_attributes

CHUNK_ATTRIBUTES = {kind: sc.ACP_TURN_CHUNK_COUNT.format(kind) for kind in sc.CHUNK_KINDS}


def end_attributes(turn: Turn, ended_by: str | None, max_len: int) -> dict[str, Any]:
    """The attributes a turn's span gets as it ends (counts, time to first chunk, stop reason, usage, output)."""
    attributes: dict[str, Any] = {CHUNK_ATTRIBUTES[k]: n for k, n in turn.chunks.items()}
    if turn.first_chunk is not None:
        attributes[sc.ACP_TURN_TIME_TO_FIRST_CHUNK] = turn.first_chunk - turn.started
    if turn.updates:
        attributes[sc.ACP_SESSION_UPDATE_COUNT] = turn.updates
    if turn.dropped:
        attributes[sc.ACP_SESSION_UPDATE_DROPPED] = turn.dropped
    if ended_by is not None:
        attributes[sc.ACP_TURN_ENDED_BY] = ended_by
    if turn.stop_reason is not None:
        if not turn.own_span:  # v1: the engine left it to this batch
            attributes[sc.ACP_STOP_REASON] = turn.stop_reason
        reason = turn.stop_reason
        attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS] = (sc.FINISH_REASONS.get(reason, reason),)
    if turn.reports_usage:
        usage_attributes(turn, attributes)
    if turn.output is not None:
        content.output_attributes(attributes, turn.output, max_len)
    return attributes


def record_turn_metrics(instruments: Instruments, turn: Turn, now: float) -> None:
    """The turn's metrics: agent-side (duration, time to first chunk, tokens) where it reports usage, else the
    GenAI client-side operation duration."""
    agent = turn.agent
    turn_attributes = instruments.turn_attributes(agent, turn.stop_reason, turn.error_type)
    if turn.reports_usage:
        if turn.first_chunk is not None:
            first_chunk = turn.first_chunk - turn.started
            instruments.first_chunk.record(first_chunk, instruments.agent_only_attributes(agent))
        record_usage(instruments, turn)
        instruments.turn_duration.record(now - turn.started, turn_attributes)
    else:
        instruments.client_turn_duration.record(now - turn.started, turn_attributes)
