"""Which agent a connection talks to (``acp_otel._agent_identity``): the profile from ``initialize``'s agent name,
else from the agent's command line, and the settings that force a profile or override its fields."""

from __future__ import annotations

import weakref
from typing import Any

import pytest

from acp_otel._agent_identity import AgentIdentity
from acp_otel._agent_profiles import BY_KEY, TITLE_PREFIX, UNKNOWN, USAGE_LAST_CALL
from acp_otel._connection import PeerState
from acp_otel._settings import load_settings


class _Connection:
    pass


def _peer() -> tuple[PeerState, _Connection]:
    connection = _Connection()  # kept alive by the caller: the state refers to it weakly
    return PeerState(weakref.ref(connection)), connection


def _identity(**options: Any) -> AgentIdentity:
    return AgentIdentity(load_settings(options, environ={}))


@pytest.mark.parametrize(
    ("result", "key"),
    [
        ({"agentInfo": {"name": "qwen-code", "version": "0.24.4"}}, "qwen-code"),  # ACP v1
        ({"info": {"name": "gemini-cli"}}, "gemini-cli"),  # ACP v2
        ({"agentInfo": {"name": "Gemini"}}, "gemini-cli"),  # an alias, compared normalized
    ],
)
def test_initialize_names_the_agent(result: dict[str, Any], key: str) -> None:
    peer, _connection = _peer()
    identity = _identity()
    identity.note_command(peer, ["npx", "opencode-ai", "acp"])  # the command said another agent
    identity.identify(peer, result)
    assert peer.profile is BY_KEY[key]


@pytest.mark.parametrize(
    "result",
    [{}, {"agentInfo": None}, {"agentInfo": {"name": 3}}, {"agentInfo": "qwen-code"}, {"agentInfo": {"name": ""}}],
)
def test_without_a_name_the_command_names_the_agent(result: dict[str, Any]) -> None:
    peer, _connection = _peer()
    identity = _identity()
    identity.note_command(peer, ["npx", "opencode-ai", "acp"])
    assert peer.command == "opencode-ai" and peer.profile is BY_KEY["opencode"]  # the package, an alias
    identity.identify(peer, result)
    assert peer.profile is BY_KEY["opencode"]


def test_an_unknown_agent_and_no_command_give_the_unknown_profile() -> None:
    peer, _connection = _peer()
    identity = _identity()
    assert identity.default is UNKNOWN
    identity.identify(peer, {"agentInfo": {"name": "an-agent-nobody-knows"}})
    assert peer.profile is UNKNOWN and peer.command is None


def test_a_forced_profile_wins_over_name_and_command() -> None:
    peer, _connection = _peer()
    identity = _identity(agent_profile="kimi-cli")
    assert identity.default is BY_KEY["kimi-cli"]
    identity.note_command(peer, ["opencode", "acp"])
    assert peer.profile is BY_KEY["kimi-cli"]
    identity.identify(peer, {"agentInfo": {"name": "qwen-code"}})
    assert peer.profile is BY_KEY["kimi-cli"]


def test_the_settings_override_the_fields_they_name_and_keep_the_rest() -> None:
    peer, _connection = _peer()
    identity = _identity(tool_names_from_titles=TITLE_PREFIX, usage_reports=USAGE_LAST_CALL)
    identity.identify(peer, {"agentInfo": {"name": "qwen-code"}})
    assert peer.profile is not None
    assert (peer.profile.key, peer.profile.tool_name_titles, peer.profile.usage) == (
        "qwen-code",
        TITLE_PREFIX,
        USAGE_LAST_CALL,
    )
    assert peer.profile.trace_keys == BY_KEY["qwen-code"].trace_keys
    assert identity.default.tool_name_titles == TITLE_PREFIX and identity.default.usage == USAGE_LAST_CALL
