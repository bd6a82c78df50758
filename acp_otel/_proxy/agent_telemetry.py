"""The agent's own telemetry under ``--agent-telemetry``: receive it on loopback, join it to the turns, forward it.

:func:`bind` runs before the agent is spawned (a socket only: cheap, nothing heavy imported), so that the
receiver's address goes into the agent's environment; :meth:`AgentTelemetry.start` then serves it from a thread
(early connections wait in the kernel's backlog), importing the receiver, the joiner and the forwarder there, off
the relay's path. The engine tells this object of each turn (:meth:`turn_started` / :meth:`turn_ended`, kept
until the joiner is ready); the joiner's proof that the agent reports its tool calls or usage goes back to the
engine (:meth:`attach`). At the agent's exit, :meth:`finish` releases what the joiner holds and gives the
forwarder until the proxy's exit deadline; what was lost is said in the proxy's one exit line.
docs/proxy.md describes it all.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque

from .agent_profile_view import AgentProfileView
from .proxy_tool_spans import ProxyToolSpans

TYPE_CHECKING = False  # not typing's: imported before the agent starts (type checkers see True)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

RELEASE_EVERY_S = 0.5  # how often held spans past their hold bound are looked for
MAX_TURN_EVENTS = 10_000  # turn starts and ends waiting for the joiner (past this the oldest are forgotten)


def bind() -> socket.socket | None:
    """A listening socket on 127.0.0.1 and a port the kernel picks; ``None`` when that fails (no receiver)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
    except OSError:
        listener.close()
        return None
    return listener


class AgentTelemetry:
    """The receiver, joiner and forwarder of one proxied agent (see the module's docstring)."""

    def __init__(
        self, listener: socket.socket, relay_name: str, capture_content: bool, command: tuple[str, ...]
    ) -> None:
        self.listener = listener
        self.endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}"
        self._relay_name = relay_name
        self.capture_content = capture_content
        self.all_spans = False  # forward every span of the agent's (else only what a user reads: .span_filter)
        self.proxy_tools = ProxyToolSpans()  # the proxy's own tool spans, noted by its tracers
        self._profile = AgentProfileView(command)
        # The turns' starts and ends, appended by the relay's threads (never blocked: a deque's append takes no
        # lock of ours) and handed to the joiner before each request it joins, and every RELEASE_EVERY_S.
        self._turn_events: deque[tuple[int, Any, int]] = deque(maxlen=MAX_TURN_EVENTS)
        self._drain_lock = threading.Lock()
        self._joiner: Any = None
        self._mapper: Any = None
        self._forwarder: Any = None
        self._receiver: Any = None
        self._signals: tuple[str, ...] = ()
        self._scrub: tuple[Any, Any] | None = None
        self._on_facts: Callable[[bool, bool], None] | None = None
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._wake: tuple[int, int] | None = None  # a pipe: the agent has exited (see _start)
        self._reported = False
        self._finishing: threading.Thread | None = None
        self._deadline = 0.0
        self._joined = threading.Event()  # every span of the agent's is joined (set at its exit)
        self._tool_listeners: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ start

    def start(self) -> None:
        """Serve from a thread (returns at once)."""
        import os

        self._wake = os.pipe()  # written at the agent's exit: the wait for a first connection ends
        threading.Thread(target=self._start, name="acp-otel-agent-telemetry", daemon=True).start()

    def _start(self) -> None:
        import logging

        try:
            # Nothing is imported until the agent connects: its start-up keeps the CPU, and an agent that never
            # exports costs a socket. Early connections wait in the kernel's backlog.
            import select

            assert self._wake is not None  # made by start()
            listening = self.listener.fileno()
            ready = select.select([listening, self._wake[0]], [], [])[0]
            if listening not in ready:  # the agent exited without connecting
                self.listener.close()
                return
            from .forwarder import Forwarder, forwarded_signals
            from .joiner import Joiner
            from .receiver import Receiver
            from .span_mapping import SpanMapper

            session_keys, tool_keys, maps = self._profile.keys()
            self._mapper = SpanMapper(maps)
            joiner = Joiner(session_keys, tool_keys, self._facts, all_spans=self.all_spans)
            joiner.on_tool_span = self._tool_seen
            joiner.proxy_tools(self.proxy_tools.lookup)
            self._signals = forwarded_signals()
            self._forwarder = Forwarder()
            from .agent_content import scrub_logs, scrub_spans

            self._scrub = (scrub_spans, scrub_logs)
            self._joiner = joiner
            self._receiver = Receiver(self.listener, self._sink)
            threading.Thread(target=self._release_loop, name="acp-otel-agent-release", daemon=True).start()
        except Exception:
            logging.getLogger("acp_otel").debug("acp_otel proxy: the agent's telemetry receiver failed", exc_info=True)
            self._joiner = None
            self.listener.close()
        finally:
            self._ready.set()

    def profile_telemetry(self) -> Any:
        """What the profile the agent's command names says of its own telemetry (``None``: nothing known)."""
        return self._profile.of_command()

    # ------------------------------------------------------------------ the engine's side

    def turn_started(self, turn: Any) -> None:
        """The engine's turn observer: a turn began (runs in a relay thread: only noted here, without the turn)."""
        context = turn.span.get_span_context()
        if context.is_valid:
            window = (context.trace_id, context.span_id, turn.session_id)
            self._turn_events.append((id(turn), window, time.time_ns()))

    def turn_ended(self, turn: Any) -> None:
        """The engine's turn observer: a turn ended."""
        self._turn_events.append((id(turn), None, time.time_ns()))

    def _joiner_now(self) -> Any:
        """The joiner, told of the turns that started or ended since it was last asked."""
        joiner = self._joiner
        if joiner is not None and self._turn_events:
            with self._drain_lock:  # one drainer at a time: a turn's start is handed over before its end
                events = self._turn_events
                while events:
                    key, window, at = events.popleft()
                    if window is not None:
                        joiner.open_window(key, *window, at)
                    else:
                        joiner.close_window(key, at)
        return joiner

    def attach(self, on_facts: Callable[[bool, bool], None], profile: Callable[[], Any] | None = None) -> None:
        """``on_facts(tools, usage)``: tell the engine the agent reports its tool calls / usage itself. Told at
        once when the agent's profile says so (an agent seen doing it here); otherwise once its spans show it.
        ``profile()``: the agent's profile as the engine knows it."""
        self._on_facts = on_facts
        self._profile.engine_profile = profile
        telemetry = self.profile_telemetry()
        if telemetry is not None and telemetry.seen and (telemetry.reports_tool_calls or telemetry.reports_usage):
            on_facts(bool(telemetry.reports_tool_calls), bool(telemetry.reports_usage))

    def on_tool_span(self, listener: Callable[[], None]) -> None:
        """``listener()`` is called (in the receiver's thread: it must be quick) when one of the agent's
        ``execute_tool`` spans has been joined (see :meth:`tool_span`)."""
        self._tool_listeners.append(listener)

    def _tool_seen(self) -> None:
        for listener in self._tool_listeners:
            listener()

    def tool_span(self, trace_id: int, tool_call_id: str) -> int | None:
        """The span id of the agent's ``execute_tool`` span of ``tool_call_id`` in trace ``trace_id`` (a turn's,
        once joined), if it has arrived."""
        joiner = self._joiner
        if joiner is None:
            return None
        span_id = joiner.tool_span(trace_id.to_bytes(16, "big"), tool_call_id)
        return int.from_bytes(span_id, "big") if span_id else None

    def joined(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` until the agent has exited and every span it sent is joined."""
        return self._joined.wait(timeout_s)

    def _facts(self, tools: bool, usage: bool) -> None:
        if self._on_facts is not None:
            self._on_facts(tools, usage)

    # ------------------------------------------------------------------ requests

    def _sink(self, signal: str, message: Any) -> None:
        joiner = self._joiner_now()
        try:
            if signal == "traces" and joiner is not None:
                self._mapper.apply(message)
                joiner.join_spans(message)
            elif signal == "logs" and joiner is not None:
                joiner.join_logs(message)
        except Exception:  # (a hostile nesting, say) forwarded as far as it was joined
            import logging

            logging.getLogger("acp_otel").debug("acp_otel proxy: could not join the agent's %s", signal, exc_info=True)
        self._forward(signal, message)
        if signal == "traces" and joiner is not None:
            self._release_logs(joiner, False)

    def _release_logs(self, joiner: Any, everything: bool) -> None:
        """Forward the log records that waited for their span (come now, or past their bound)."""
        try:
            logs = joiner.ready_logs(everything)
        except Exception:
            return
        if logs is not None:
            self._forward("logs", logs)

    def _forward(self, signal: str, message: Any) -> None:
        if signal not in self._signals:
            return
        scrub = self._scrub
        if scrub is not None and signal in ("traces", "logs"):
            (scrub[0] if signal == "traces" else scrub[1])(message, self.capture_content, self._profile.name)
        from .forwarder import mark_relay

        mark_relay(signal, message, self._relay_name)
        self._forwarder.put(signal, message)

    def _release_loop(self) -> None:
        while not self._stop.wait(RELEASE_EVERY_S):
            self._release(False)

    def _release(self, everything: bool) -> None:
        joiner = self._joiner_now()
        if joiner is None:
            return
        request = joiner.release(everything)
        if request is not None:
            self._forward("traces", request)
        self._release_logs(joiner, everything)

    # ------------------------------------------------------------------ exit

    def finish_async(self, deadline: float) -> None:
        """:meth:`finish` in a thread of its own (:meth:`problems` waits for it, until ``deadline``)."""
        self._deadline = deadline
        self._finishing = threading.Thread(target=self.finish, args=(deadline,), name="acp-otel-agent-finish")
        self._finishing.daemon = True
        self._finishing.start()

    def finish(self, deadline: float) -> None:
        """The agent has exited: stop receiving, release every held span and forward until ``deadline``."""
        if self._wake is not None:
            import os

            os.write(self._wake[1], b"\0")
        self._ready.wait(max(0.0, deadline - time.monotonic()))
        self._stop.set()
        if self._receiver is not None:
            self._receiver.close()
        try:
            self._release(True)
        finally:
            self._joined.set()
        if self._joiner is not None and not self.all_spans:
            _say_left_out(self._joiner.spans_left_out)
        if self._forwarder is not None:
            self._forwarder.close(deadline)

    def report(self) -> None:
        """Say on stderr what :meth:`problems` has still to say (when the proxy's own telemetry did not)."""
        found = self.problems()
        if found:
            import sys

            sys.stderr.write("acp-otel proxy: telemetry: " + "; ".join(found) + "\n")

    def problems(self) -> list[str]:
        """What was not forwarded (said once: later calls return nothing)."""
        if self._finishing is not None:
            self._finishing.join(max(0.0, self._deadline - time.monotonic()) + 0.05)
        if self._reported or self._forwarder is None:
            return []
        self._reported = True
        return list(self._forwarder.problems())


def _say_left_out(count: int) -> None:
    """With ``-v``: how many of the agent's spans the filter left out (no loss: not in the exit line)."""
    import logging

    logging.getLogger("acp_otel").debug(
        "acp_otel proxy: %d of the agent's spans left out, not what a user reads "
        "(--agent-telemetry-spans all forwards them)",
        count,
    )


def relay_name(service_name: str | None, command: tuple[str, ...], environ: Mapping[str, str]) -> str:
    """The proxy's ``service.name`` as its telemetry will have it (for the forwarded resources)."""
    if service_name:
        return service_name
    named = environ.get("OTEL_SERVICE_NAME", "").strip()
    if named:
        return named
    from .._child_env import proxy_service_name

    return proxy_service_name(command)
