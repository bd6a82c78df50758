"""Usage, cost and context window of a turn: what the agent reports, checked against bounds, on the turn's
span and metrics (only on the side that reports usage: :attr:`Turn.reports_usage`).

Token counts come from a v1 ``session/prompt`` result or a v2 ``idle`` state update (``usage``), read as the
agent's profile says (:mod:`._agent_profiles`): the turn's counts; a session's running total, of which the turn's
are the change since the previous report, remembered per connection (:attr:`Turn.usage_totals`); the last model
call's only (kept apart from the turn's); or, without ``usage``, counts in the agent's own ``_meta``. The context
window and the session's cumulative cost come from ``usage_update`` updates. A turn's cost is the change of the
session's cumulative cost, remembered per connection (:attr:`Turn.costs`).
"""

from __future__ import annotations

import math
from typing import Any

from . import _semconv as sc
from ._agent_profiles import USAGE_AGENT_META, USAGE_LAST_CALL, USAGE_RUNNING_TOTAL, USAGE_TURN, AgentProfile
from ._metrics import Instruments
from ._turn_state import Turn

# Usage and cost (usage_update): values outside these bounds are ignored, never recorded.
_MAX_INT = 2**63  # an OTel int attribute is 64-bit
MAX_COST = 1e12  # a cumulative cost beyond a trillion currency units is not a real figure
_MAX_CURRENCY = 16  # characters (ISO 4217 codes are 3)
# Sessions whose last cumulative cost is remembered per connection (the oldest goes first).
MAX_COST_SESSIONS = 1024


def _counts(usage: dict[str, Any], keys: Any) -> dict[str, int]:
    """``{attribute: count}`` of ``usage``'s ``(key, attribute)`` pairs, each count within an OTel int's range."""
    tokens: dict[str, int] = {}
    for key, attribute in keys:
        value = usage.get(key)
        if type(value) is int and 0 <= value < _MAX_INT:
            tokens[attribute] = value
    return tokens


def _meta_counts(profile: AgentProfile, source: dict[str, Any]) -> dict[str, int]:
    """Token counts where the profile says the agent's own ``_meta`` of the result holds them (Gemini CLI's
    ``quota.token_count``)."""
    value: Any = source.get("_meta")
    for key in profile.usage_meta:
        value = value.get(key) if type(value) is dict else None
    if type(value) is not dict:
        return {}
    input_key, output_key = profile.usage_meta_keys
    return _counts(value, ((input_key, sc.GEN_AI_USAGE_INPUT_TOKENS), (output_key, sc.GEN_AI_USAGE_OUTPUT_TOKENS)))


def take_usage(turn: Turn, source: dict[str, Any]) -> None:
    """Token counts of a result (or ``idle`` update), read as the turn's agent profile says."""
    profile = turn.profile
    usage = source.get("usage")
    tokens = _counts(usage, sc.USAGE_ATTRIBUTES) if type(usage) is dict else {}
    kind = profile.usage
    if not tokens:
        if not profile.usage_meta:
            return
        tokens = _meta_counts(profile, source)
        if not tokens:
            return
        kind = USAGE_AGENT_META
    elif kind == USAGE_AGENT_META:  # ACP's usage, when the agent sends it after all: the turn's
        kind = USAGE_TURN
    elif kind == USAGE_RUNNING_TOTAL:
        tokens = _turn_share(turn, tokens)
    turn.usage_source = kind
    if turn.usage is None:
        turn.usage = tokens
    else:
        turn.usage.update(tokens)


def _turn_share(turn: Turn, totals: dict[str, int]) -> dict[str, int]:
    """The turn's counts from a session's running totals: the change since the session's previous report on this
    connection. The first report, or one where a count went down (a new or reset total), is taken whole."""
    known = turn.usage_totals
    if known is None:
        return totals
    previous = known.get(turn.session_id)
    if turn.session_id not in known and len(known) >= MAX_COST_SESSIONS:
        del known[next(iter(known))]
    known[turn.session_id] = totals
    if previous is None or any(value < previous.get(key, 0) for key, value in totals.items()):
        return totals
    return {key: value - previous.get(key, 0) for key, value in totals.items()}


def note_usage_update(turn: Turn, update: dict[str, Any]) -> None:
    """A ``usage_update``: the context window (last seen), and the session's cumulative cost."""
    used = update.get("used")
    if type(used) is int and 0 <= used < _MAX_INT:
        turn.context_used = used
    size = update.get("size")
    if type(size) is int and 0 <= size < _MAX_INT:
        turn.context_size = size
    cost = update.get("cost")
    if type(cost) is not dict:
        return
    value = cost.get("amount")
    currency = cost.get("currency")
    if type(value) is not int and type(value) is not float:  # not bool, not a string
        return
    if not 0 <= value <= MAX_COST:  # negative, huge (2**70), NaN: ignored
        return
    if type(currency) is not str or not 0 < len(currency) <= _MAX_CURRENCY:
        return
    amount = float(value)
    if not math.isfinite(amount):
        return
    costs = turn.costs
    previous = costs.get(turn.session_id) if costs is not None else None
    if previous is None or previous[1] != currency or amount < previous[0]:
        # The session's first figure on this connection, a new currency, or a reset: counted from zero.
        spent = amount
    else:
        spent = amount - previous[0]
    if turn.cost is None or turn.currency != currency:
        turn.cost, turn.currency = spent, currency
    else:
        turn.cost += spent
    turn.cost = round(turn.cost, 12)  # float subtraction noise (0.3 - 0.1)
    if costs is not None:
        if turn.session_id not in costs and len(costs) >= MAX_COST_SESSIONS:
            del costs[next(iter(costs))]
        costs[turn.session_id] = (amount, currency)


def usage_attributes(turn: Turn, attributes: dict[str, Any]) -> None:
    """Add the usage, context window and cost the turn knows to its end ``attributes``."""
    usage = turn.usage
    if usage:
        if turn.usage_source == USAGE_LAST_CALL:  # not the turn's: under names of their own
            last_call = sc.LAST_CALL_ATTRIBUTES
            attributes.update({last_call[key]: value for key, value in usage.items()})
        else:
            attributes.update(usage)
        attributes[sc.ACP_USAGE_SOURCE] = turn.usage_source or USAGE_TURN
    if turn.context_used is not None:
        attributes[sc.ACP_USAGE_CONTEXT_USED] = turn.context_used
    if turn.context_size is not None:
        attributes[sc.ACP_USAGE_CONTEXT_SIZE] = turn.context_size
    if turn.cost is not None and turn.currency is not None:
        attributes[sc.ACP_USAGE_COST_AMOUNT] = turn.cost
        attributes[sc.ACP_USAGE_COST_CURRENCY] = turn.currency


def record_usage(instruments: Instruments, turn: Turn) -> None:
    """The turn's token and cost metrics (the turn layer records the turn's duration beside them)."""
    agent = turn.agent
    usage = turn.usage
    if usage and turn.usage_source != USAGE_LAST_CALL:  # a last call's counts are not the turn's: not counted
        tokens = usage.get(sc.GEN_AI_USAGE_INPUT_TOKENS)
        if tokens is not None:
            instruments.input_tokens.add(tokens, instruments.agent_only_attributes(agent))
        tokens = usage.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS)
        if tokens is not None:
            instruments.output_tokens.add(tokens, instruments.agent_only_attributes(agent))
    if turn.cost is not None and turn.currency is not None:
        instruments.cost.add(turn.cost, instruments.cost_attributes(agent, turn.currency))
