"""What the agent's profile says of its own telemetry, for :mod:`.agent_telemetry`: looked up from its command
(before it has answered), then from the profile the engine settled on (``initialize``'s ``agentInfo``). Light:
imported before the agent starts; the profiles are imported on first use."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: imported before the agent starts (type checkers see True)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class AgentProfileView:
    """The agent's profile as far as its own telemetry goes."""

    def __init__(self, command: tuple[str, ...]) -> None:
        self._command = command
        self._telemetry: Any = False  # the profile's AgentTelemetry, looked up once (False: not yet)
        self.name: str | None = None  # the profile's key (None: no profile)
        self.engine_profile: Callable[[], Any] | None = None  # the profile as the engine knows it

    def of_command(self) -> Any:
        """What the profile the agent's command names says of its own telemetry (``None``: nothing known)."""
        if self._telemetry is False:
            self._telemetry = None
            try:
                from .._agent_profiles import identify, telemetry_of
                from .._child_env import command_name

                profile = identify(command_name(self._command))
                self.name = profile.key if profile is not None else None
                self._telemetry = telemetry_of(profile)
            except Exception:
                pass
        return self._telemetry

    def keys(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[Any, ...]]:
        """The span attributes the profile says carry the session id and tool call id (if it says), and its span
        maps: the profile the engine settled on (by the agent's first export), else the command's."""
        telemetry = self.of_command()
        try:
            profile = self.engine_profile() if self.engine_profile is not None else None
            if profile is not None and getattr(profile, "key", "none") != "none":  # UNKNOWN's key
                from .._agent_profiles import telemetry_of

                telemetry, self.name = telemetry_of(profile), profile.key
        except Exception:
            pass
        return (
            tuple(getattr(telemetry, "session_id_keys", ())),
            tuple(getattr(telemetry, "tool_call_id_keys", ())),
            tuple(getattr(telemetry, "span_maps", ())),
        )
