"""Which agent a connection talks to, looked up once per connection (never per message): its profile
(:mod:`._agent_profiles`) from the name ``initialize`` gives (``agentInfo.name``), else from the agent's command
line (the proxy's, or an agent the SDK spawned), until ``initialize`` names it."""

from __future__ import annotations

from typing import Any

from ._agent_profiles import AgentProfile, resolve
from ._child_env import command_name
from ._connection import PeerState
from ._settings import Settings


class AgentIdentity:
    """Sets each connection's agent profile (``PeerState.profile``) as the connection learns who its agent is."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.default = self._profile(None, None)  # a connection that has not said (or the forced profile)

    def _profile(self, agent_name: Any, command: str | None) -> AgentProfile:
        settings = self._settings
        return resolve(
            agent_name,
            command,
            forced=settings.agent_profile,
            titles=settings.tool_names_from_titles,
            usage=settings.usage_reports,
        )

    def identify(self, peer: PeerState, result: dict[str, Any]) -> None:
        """An ``initialize`` result: the connection's agent profile, from ``agentInfo.name`` (else the command)."""
        info = result.get("agentInfo")
        if info is None:
            info = result.get("info")  # ACP v2
        peer.profile = self._profile(info.get("name") if type(info) is dict else None, peer.command)

    def note_command(self, peer: PeerState, command: Any) -> None:
        """The agent's command line: the profile it names, until ``initialize`` names the agent."""
        peer.command = command_name(command)
        peer.profile = self._profile(None, peer.command)
