"""A session's running total of tokens (GitHub Copilot CLI's ``PromptResponse.usage``) read as each turn's share:
over many turns, and across a reset (a new session total), never negative, never counted twice. Through the
public function the engine calls with each prompt's result (:func:`acp_otel._usage.take_usage`), a turn per
report, the connection's totals shared between them as the engine shares them."""

from __future__ import annotations

from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN

from acp_otel._agent_profiles import BY_KEY, USAGE_RUNNING_TOTAL
from acp_otel._turn_state import Turn
from acp_otel._usage import take_usage, usage_attributes

INPUT, OUTPUT, TOTAL = "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "acp.usage.total_tokens"


def _shares(reports: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    """Each turn's end attributes for ``(session, input running total, output running total)`` reports."""
    totals: dict[str, dict[str, int]] = {}  # the connection's, kept across its turns
    out = []
    for session, inputs, outputs in reports:
        turn = Turn(INVALID_SPAN, Context(), session, False, "copilot")
        turn.profile, turn.usage_totals = BY_KEY["copilot-cli"], totals
        assert turn.profile.usage == USAGE_RUNNING_TOTAL
        usage = {"inputTokens": inputs, "outputTokens": outputs, "totalTokens": inputs + outputs}
        take_usage(turn, {"stopReason": "end_turn", "usage": usage})
        attributes: dict[str, Any] = {}
        usage_attributes(turn, attributes)
        out.append(attributes)
    return out


def test_a_running_total_over_many_turns_gives_each_turn_its_own_share() -> None:
    shares = _shares([("s", 100, 10), ("s", 150, 25), ("s", 210, 27), ("s", 400, 50), ("s", 400, 50)])
    assert [(a[INPUT], a[OUTPUT], a[TOTAL]) for a in shares] == [
        (100, 10, 110),
        (50, 15, 65),
        (60, 2, 62),
        (190, 23, 213),
        (0, 0, 0),  # nothing new: nothing spent
    ]
    assert {a["acp.usage.source"] for a in shares} == {"running_total"}


def test_a_running_total_that_resets_starts_a_new_total_never_a_negative_share() -> None:
    # The agent started a new session total (a restart, a compaction): the report after it is taken whole.
    shares = _shares([("s", 100, 10), ("s", 150, 25), ("s", 30, 5), ("s", 70, 9), ("s", 70, 4)])
    assert [(a[INPUT], a[OUTPUT]) for a in shares] == [(100, 10), (50, 15), (30, 5), (40, 4), (70, 4)]
    assert all(value >= 0 for a in shares for key, value in a.items() if key.endswith("_tokens"))


def test_running_totals_are_kept_per_session() -> None:
    shares = _shares([("a", 100, 10), ("b", 40, 4), ("a", 130, 12), ("b", 50, 5), ("a", 160, 20)])
    assert [(a[INPUT], a[OUTPUT]) for a in shares] == [(100, 10), (40, 4), (30, 2), (10, 1), (30, 8)]


def test_a_count_that_appears_later_in_a_running_total_is_counted_from_zero() -> None:
    totals: dict[str, dict[str, int]] = {}
    shares = []
    for usage in ({"inputTokens": 100}, {"inputTokens": 150, "cachedReadTokens": 40}, {"inputTokens": 160}):
        turn = Turn(INVALID_SPAN, Context(), "s", False, "copilot")
        turn.profile, turn.usage_totals = BY_KEY["copilot-cli"], totals
        take_usage(turn, {"usage": usage})
        shares.append(turn.usage)
    cached = "gen_ai.usage.cache_read.input_tokens"
    assert shares == [{INPUT: 100}, {INPUT: 50, cached: 40}, {INPUT: 10}]


def test_the_running_totals_of_at_most_1024_sessions_are_kept_the_oldest_forgotten_first() -> None:
    totals: dict[str, dict[str, int]] = {}

    def share(session: str, inputs: int) -> int:
        turn = Turn(INVALID_SPAN, Context(), session, False, "copilot")
        turn.profile, turn.usage_totals = BY_KEY["copilot-cli"], totals
        take_usage(turn, {"usage": {"inputTokens": inputs}})
        assert turn.usage is not None
        return turn.usage[INPUT]

    for n in range(1025):  # one session more than are remembered
        share(f"s{n}", 100)
    assert len(totals) == 1024 and "s0" not in totals
    assert share("s1", 130) == 30  # still known
    assert share("s0", 100) == 100  # forgotten: its report taken whole


def test_gemini_clis_counts_from_its_own_meta_and_a_second_report_in_a_turn() -> None:
    def usage_of(*sources: dict[str, Any]) -> dict[str, Any]:
        turn = Turn(INVALID_SPAN, Context(), "s", False, "gemini")
        turn.profile = BY_KEY["gemini-cli"]
        for source in sources:
            take_usage(turn, source)
        attributes: dict[str, Any] = {}
        usage_attributes(turn, attributes)
        return attributes

    meta = {"_meta": {"quota": {"token_count": {"input_tokens": 70, "output_tokens": 9}}}}
    assert usage_of(meta) == {INPUT: 70, OUTPUT: 9, "acp.usage.source": "agent_meta"}
    acp_usage = {"usage": {"inputTokens": 80, "outputTokens": 10}}
    assert usage_of({**meta, **acp_usage}) == {INPUT: 80, OUTPUT: 10, "acp.usage.source": "turn"}
    assert usage_of({"_meta": {"quota": {}}}) == {} and usage_of({"stopReason": "end_turn"}) == {}
    # A second report in the same turn (a v2 idle update, then the result): its counts win.
    assert usage_of(meta, {"usage": {"outputTokens": 12}}) == {INPUT: 70, OUTPUT: 12, "acp.usage.source": "turn"}
    # An agent whose profile has no such place: nothing from its _meta.
    turn = Turn(INVALID_SPAN, Context(), "s", False, "other")
    take_usage(turn, meta)
    assert turn.usage is None and turn.usage_source is None


def test_a_last_model_calls_counts_go_under_names_of_their_own() -> None:
    turn = Turn(INVALID_SPAN, Context(), "s", False, "opencode")
    turn.profile = BY_KEY["opencode"]
    take_usage(turn, {"usage": {"inputTokens": 30, "outputTokens": 4}})
    attributes: dict[str, Any] = {}
    usage_attributes(turn, attributes)
    assert attributes == {
        "acp.usage.last_call.input_tokens": 30,
        "acp.usage.last_call.output_tokens": 4,
        "acp.usage.source": "last_call",
    }


def test_the_cumulative_costs_of_at_most_1024_sessions_are_kept_the_oldest_forgotten_first() -> None:
    from acp_otel._usage import note_usage_update

    costs: dict[str, tuple[float, str]] = {}

    def spent(session: str, amount: float) -> float | None:
        turn = Turn(INVALID_SPAN, Context(), session, False, "agent")
        turn.costs = costs
        note_usage_update(turn, {"sessionUpdate": "usage_update", "cost": {"amount": amount, "currency": "USD"}})
        return turn.cost

    for n in range(1025):  # one session more than are remembered
        spent(f"s{n}", 1.0)
    assert len(costs) == 1024 and "s0" not in costs
    assert spent("s1", 1.5) == 0.5  # still known
    assert spent("s0", 1.0) == 1.0  # forgotten: counted from zero
