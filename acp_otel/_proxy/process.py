"""Run the agent under the proxy: spawn, relay both ways, forward signals, pass on the exit status.

Lifecycle (docs/proxy-lifecycle.md has the whole story):

* the agent is started first, before anything heavy is imported (this module imports only what spawning
  needs; logging, the engine and OpenTelemetry come after), in a process group of its own (so that a signal
  reaches all of it, as a terminal's Ctrl-C would) and, on Linux, set to be killed if the proxy dies
  (``PR_SET_PDEATHSIG``), so that it never outlives a SIGKILLed proxy. The signal handlers are installed
  before it is spawned;
* until the agent's first output, lines are relayed with the standard library (:mod:`.early`); then telemetry
  is set up in a thread beside the relay (:class:`_Tracing`): the engine, which traces the lines relayed before
  it, then the SDK; no line waits for the SDK (:mod:`.deferred`);
* end of the editor's input closes the agent's stdin; the agent's exit ends the proxy: what the agent
  wrote is relayed, without waiting for end of file (a child of the agent may hold its stdout for
  ever), pending spans end with an error, spans are flushed (bounded), and the proxy exits with the
  agent's status or dies of the signal that killed it;
* SIGTERM, SIGINT and SIGHUP are forwarded to the agent's process group while the agent runs; after a
  forwarded signal the flush is held to :data:`SIGNAL_FLUSH_BUDGET_S`, well inside an editor's grace;
* a command that cannot be found prints one line on stderr and exits 127 (126: found, not runnable).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time

from .._child_env import proxy_agent_environment

# Not typing's, nor logging at import: this module runs before the agent is started (type checkers see True).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging
    from typing import Any

    from .early import EarlyLines
    from .options import ProxyOptions


def _logger() -> logging.Logger:
    import logging

    return logging.getLogger("acp_otel")


FORWARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
# After the agent exits, what it wrote is relayed until the relay has read the pipe empty (end of file is not
# waited for: a child of the agent may hold the pipe open for ever). The relay is given up once no byte has
# been read for this long (an editor that stops reading), and in any case after OUTPUT_DRAIN_CAP_S (a child of
# the agent that goes on writing): an idle bound, not a total one, so that an editor reading slowly (or a
# relay starved of CPU on a busy machine) still gets every byte the agent wrote.
OUTPUT_DRAIN_TIMEOUT_S = 0.5
OUTPUT_DRAIN_CAP_S = 1.0
# The flush after a forwarded signal: the SDK's editor SIGKILLs 2 s after its SIGTERM, acpx 1.5 s.
SIGNAL_FLUSH_BUDGET_S = 1.0
# Spans kept for the SDK before the agent's first output: past this many, the SDK is set up at once.
EARLY_SPANS = 1000
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _child_setup() -> Any:
    """What the agent's process runs between fork and exec: its own process group, and death with the proxy.

    ``None`` off POSIX. The prctl function is looked up here, before the fork: nothing may be imported
    in the child.
    """
    if os.name != "posix":
        return None
    prctl: Any = None
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None
    proxy_pid = os.getpid()

    def setup() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            # The editor's SIGKILL of the proxy reaches the agent, as it would without the proxy.
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != proxy_pid:  # the proxy died before the call
                os.kill(os.getpid(), signal.SIGKILL)

    return setup


def _spawn(command: tuple[str, ...], agent: Any = None) -> subprocess.Popen[bytes] | int:
    try:
        # See acp_otel._child_env: what the agent inherits (its own telemetry sent to ``agent``'s receiver, if any).
        env = (
            proxy_agent_environment(os.environ, command)
            if agent is None
            else proxy_agent_environment(
                os.environ, command, telemetry_endpoint=agent.endpoint, capture_content=agent.capture_content
            )
        )
        return subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env, preexec_fn=_child_setup()
        )
    except FileNotFoundError:
        sys.stderr.write(f"acp-otel proxy: {command[0]}: command not found\n")
        return 127
    except PermissionError:
        sys.stderr.write(f"acp-otel proxy: {command[0]}: permission denied\n")
        return 126
    except OSError as exc:
        sys.stderr.write(f"acp-otel proxy: {command[0]}: {exc.strerror or exc}\n")
        return 126


class _Signals:
    """Forwards SIGTERM, SIGINT and SIGHUP to the agent's process group while the agent runs.

    Installed before the agent is spawned: a signal that arrives before the agent's process is known is
    kept and forwarded as soon as it is (:meth:`started`), so none is lost and none kills the proxy alone.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []
        self.forwarded = False  # a signal reached the agent: the editor is waiting for the proxy's exit
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self._forward)

    def started(self, proc: subprocess.Popen[bytes]) -> None:
        """The agent runs: forward what arrived before (the handler runs between this method's steps too)."""
        self.proc = proc
        while self.pending:
            self._forward(self.pending.pop(0), None)

    def _forward(self, signum: int, _frame: Any) -> None:
        proc = self.proc
        if proc is None:
            self.pending.append(signum)
            return
        if proc.returncode is not None:
            return  # the agent has exited; what stays of its group stays, as it would without the proxy
        self.forwarded = True
        _logger().debug("acp_otel proxy: forwarding signal %d to the agent's process group", signum)
        try:
            os.killpg(proc.pid, signum)  # the agent leads its own group (see _child_setup)
        except (ProcessLookupError, PermissionError, AttributeError):
            with contextlib.suppress(ProcessLookupError, OSError):
                proc.send_signal(signum)

    def flush_timeout(self, configured_s: float) -> float:
        """The flush bound: ``configured_s``, cut to :data:`SIGNAL_FLUSH_BUDGET_S` after a forwarded signal."""
        return min(configured_s, SIGNAL_FLUSH_BUDGET_S) if self.forwarded else configured_s


def _exporter_names(variable: str) -> list[str]:
    names = [n.strip().lower() for n in (os.environ.get(variable, "").strip() or "otlp").split(",") if n.strip()]
    return [n for n in names if n != "none"]


class _Tracing:
    """The engine and the telemetry, set up in a thread beside the relay (see docs/proxy-lifecycle.md).

    Until the agent has written its first line, the engine is not even imported (its import would take CPU
    from the agent's start): :mod:`.early` relays the lines it can decide with the standard library and keeps
    them; the engine, once imported, traces them with the ids and times they were relayed with (:meth:`_replay`).
    A line :mod:`.early` cannot decide starts the engine's import at once and waits for it, as does every line
    after it. The SDK and the exporters come after the engine, and no line waits for them: spans and metric
    records are made by :mod:`.deferred` until they are ready. Without :mod:`.early` (a configuration it
    cannot stand in for) lines wait for the engine, imported at once; a sampler or a traces exporter
    :mod:`.deferred` cannot stand in for (a plug-in) makes lines wait for the whole set-up.
    """

    def __init__(self, options: ProxyOptions, traces: bool, metrics: bool, agent: Any = None) -> None:
        self.options = options
        self.agent = agent  # the agent's own telemetry (.agent_telemetry), told of every turn
        self.traces = traces
        self.metrics = metrics
        self.ready = threading.Event()  # lines may go to self.tracer (None: relay them untraced)
        self.done = threading.Event()  # the set-up is over, successful or not
        self.released = threading.Event()  # set with ready, or when the agent's exit leaves no time to wait
        self.go = threading.Event()  # the SDK may be set up: the agent has started (or exited)
        self.start = threading.Event()  # the engine may be imported (set at once without self.early)
        self.lock = threading.Lock()  # held while self.early relays a line, and while the engine takes over
        self.early: EarlyLines | None = None
        self.must_wait = False  # a line is waiting for the engine: every later line waits too
        self.tracer: Any = None
        self.tel: Any = None
        self.collector: Any = None
        if traces and set(_exporter_names("OTEL_TRACES_EXPORTER")) <= {"otlp", "console"}:
            from .early import stand_in_for

            self.early = stand_in_for(options.settings_options, extra_keys=_agent_parent_keys(options))
        if self.early is None:
            self.start.set()
        threading.Thread(target=self._setup, name="acp-otel-setup", daemon=True).start()

    def handler(self, to_agent: bool) -> Any:
        """The line handler of one direction; lines :mod:`.early` does not relay wait for :attr:`ready`."""
        handle: Any = None

        def on_line(line: bytes) -> Any:
            nonlocal handle
            if handle is None:
                early = self.early
                if early is not None:
                    with self.lock:
                        # Past EARLY_SPANS kept lines, the engine is imported and the lines wait for it.
                        if self.early is not None and not self.must_wait and len(early.kept) < EARLY_SPANS:
                            forward = early.relay(to_agent, line)
                            if forward is not None:
                                # The agent's first output: it has started; the engine's turn, once this line is out.
                                return forward, (None if to_agent else self._agent_started)
                            self.must_wait = True
                            self.start.set()
                self.released.wait()
                tracer = self.tracer if self.ready.is_set() else None
                if tracer is None:
                    handle = _untouched
                else:
                    from .tracing import Direction

                    handle = tracer.handler(Direction.EDITOR_TO_AGENT if to_agent else Direction.AGENT_TO_EDITOR)
                if not to_agent:  # the agent's first output: it has started; the SDK's turn, once this line is out
                    forward, done = handle(line)
                    return forward, self._go_after(done)
            return handle(line)

        return on_line

    def _agent_started(self) -> None:
        self.start.set()
        self.go.set()

    def _go_after(self, done: Any) -> Any:
        def run() -> None:
            try:
                if done is not None:
                    done()
            finally:
                self.go.set()

        return run

    def _setup(self) -> None:
        try:
            self.start.wait()
            if not self.options.verbose:
                from .diagnostics import configure_logging

                configure_logging(False)  # here, not before the relay: logging's imports are not needed there
            from .. import _metrics
            from .._settings import load_settings
            from ..version import __version__
            from . import deferred
            from .collector import install_collector

            self.collector = install_collector()  # before the settings are read: a rejected one is reported
            settings = load_settings(self.options.settings_options)
            decide = deferred.early_sampler() if self.traces else None
            early = not self.traces or (
                decide is not None and set(_exporter_names("OTEL_TRACES_EXPORTER")) <= {"otlp", "console"}
            )
            if early:
                early_tracer = deferred.DeferredTracer(decide, self.go.set, EARLY_SPANS) if decide is not None else None
                if early_tracer is not None and self.agent is not None:  # the proxy's tool spans, for the joiner
                    early_tracer.on_early_start = self.agent.proxy_tools.started
                early_meters = deferred.DeferredMeterProvider() if self.metrics else None
                instruments = (
                    _metrics.make_instruments(early_meters, __version__, buckets_from_views=True)
                    if early_meters
                    else None
                )
                self.tracer = self._engine(early_tracer, settings, instruments)
                self._replay(early_tracer)
                self._ready()  # from here on lines are traced; the SDK comes next
                self.go.wait()
            try:
                tel = self._telemetry()
                meter_provider = tel.add_meter_provider() if self.metrics else None
                real_instruments = (
                    _metrics.make_instruments(meter_provider, __version__, buckets_from_views=True)
                    if meter_provider
                    else None
                )
            except Exception:
                if early:  # nothing will record what the engine keeps: it stops keeping it
                    with self.tracer.lock:
                        if early_tracer is not None:
                            early_tracer.attach(None, _no_ids)
                        if instruments is not None:
                            deferred.attach_instruments(instruments, None)
                raise
            if early:
                with self.tracer.lock:  # no line is traced while the early spans are recorded
                    if early_tracer is not None:
                        count = early_tracer.attach(tel.tracer() if tel.enabled else None, tel.force_ids)
                        _logger().debug(
                            "acp_otel proxy: %d span(s) started before the SDK was ready, recorded now", count
                        )
                    if instruments is not None:
                        deferred.attach_instruments(instruments, real_instruments)
            elif tel.enabled or real_instruments is not None:
                self.tracer = self._engine(tel.tracer() if tel.enabled else None, settings, real_instruments)
            self.tel = tel
            _logger().info("acp_otel proxy: exporting %s", tel.settled())
        except Exception:
            _logger().debug("acp_otel proxy: tracing disabled, setup failed", exc_info=True)
        finally:
            with self.lock:  # what was relayed before is not traced now; later lines go past self.early
                self.early = None
            self._ready()
            self.done.set()

    def _replay(self, early_tracer: Any) -> None:
        """Trace the lines :mod:`.early` relayed, with the ids and times they were relayed with; then the
        engine takes every line (:attr:`early` is ``None`` from here on)."""
        with self.lock:
            early, self.early = self.early, None
            if early is None:
                return
            from .tracing import Direction

            engine = self.tracer.engine
            seen: list[float] = [0.0]
            engine.use_clock(lambda: seen[0])
            try:
                for line in early.kept:
                    seen[0] = line.monotonic
                    if early_tracer is not None:
                        early_tracer.clock = lambda at=line.time_ns: at
                        if line.ids is not None:
                            early_tracer.force_ids(*line.ids)
                    direction = Direction.EDITOR_TO_AGENT if line.to_agent else Direction.AGENT_TO_EDITOR
                    forward, done = self.tracer.on_line(direction, line.line)
                    if done is not None:
                        done()
                    if forward != line.forwarded:  # the ids would not match the span's: said, for the tests
                        _logger().debug("acp_otel proxy: an early line was traced as %r, relayed as %r", forward, line)
            finally:
                engine.use_clock(None)
                if early_tracer is not None:
                    early_tracer.clock = time.time_ns
            _logger().debug("acp_otel proxy: %d line(s) relayed before the engine existed, traced now", len(early.kept))

    def _ready(self) -> None:
        self.ready.set()
        self.released.set()

    def settle(self, deadline: float) -> None:
        """The agent has exited: give the set-up until ``deadline`` to take the lines still waiting for it,
        then let them through untraced, so that the agent's last output is relayed in time."""
        self.start.set()
        self.go.set()
        self.ready.wait(max(0.0, deadline - time.monotonic()))
        self.released.set()

    def _telemetry(self) -> Any:
        from .._child_env import proxy_service_name
        from . import telemetry

        options = self.options
        derived = options.service_name or proxy_service_name(options.command)
        return telemetry.configure(derived, options.service_name is not None, self.collector, self.agent)

    def _engine(self, tracer: Any, settings: Any, instruments: Any) -> Any:
        """A message tracer on the engine; ``tracer`` ``None``: no spans and nothing injected (metrics only)."""
        import dataclasses

        from opentelemetry import trace

        from .._engine import Engine
        from .tracing import MessageTracer

        if tracer is None:
            tracer, settings = trace.NoOpTracer(), dataclasses.replace(settings, inject=False)
        elif not settings.extra_trace_keys:  # the agent's own keys, unasked, option on or off
            settings = dataclasses.replace(settings, extra_trace_keys=_agent_parent_keys(self.options))
        engine = Engine(tracer, settings, instruments)
        message_tracer = MessageTracer(engine)
        engine.note_agent_command(message_tracer.peer, self.options.command)  # the profile, until initialize names it
        if self.agent is not None:
            _observe(self.agent, engine, message_tracer)
        return message_tracer

    def finish(self, returncode: int, signals: _Signals, deadline: float) -> None:
        """After the agent's exit: end pending spans, flush, say what was lost. The set-up is waited for until
        ``deadline``; the flush then has the whole flush budget, or what is left of it after a forwarded
        signal (the editor's grace is short then)."""
        budget = signals.flush_timeout(self.options.flush_timeout_s)
        if not self.done.wait(max(0.0, deadline - time.monotonic())):
            sys.stderr.write(
                f"acp-otel proxy: telemetry: not set up after {budget:g} s (--flush-timeout); nothing exported\n"
            )
            return
        if signals.forwarded:
            budget = max(0.0, deadline - time.monotonic())
        if self.tracer is not None:
            how = f"signal {-returncode}" if returncode < 0 else f"status {returncode}"
            self.tracer.close(f"agent exited with {how}")
        if self.tel is not None:
            if self.agent is not None:
                self.tel.more_problems.append(self.agent.problems)
            # Bounded (tighter after a forwarded signal); says in one line what could not be exported.
            self.tel.finish(budget)


def _observe(agent: Any, engine: Any, message_tracer: Any) -> None:
    """The agent's own telemetry learns each turn; what it proves the agent reports goes back to the engine."""

    def on_facts(tools: bool, usage: bool) -> None:
        with message_tracer.lock:
            engine.note_agent_reports(message_tracer.peer, tools=tools, usage=usage)

    def profile() -> Any:
        with message_tracer.lock:
            state = engine.peer_state(message_tracer.peer)
            return state.profile if state is not None else None

    engine.observe_turns(agent)
    agent.attach(on_facts, profile)


def _agent_parent_keys(options: ProxyOptions) -> tuple[str, ...]:
    """The ``_meta`` keys the agent its command names takes a trace parent from (Qwen Code's), written by the
    engine whenever it writes trace context, ``--agent-telemetry`` or not (see :meth:`_Tracing._engine`), unless
    ``--extra-trace-keys`` names others; from the light data module: the profiles are not imported before the
    agent has answered."""
    if options.settings_options.get("extra_trace_keys"):
        return ()
    from .._agent_switches import PARENT_META_KEYS, key_of
    from .._child_env import command_name

    return PARENT_META_KEYS.get(key_of(command_name(options.command)) or "", ())


def _no_ids(_trace_id: int | None, _span_id: int | None) -> None:
    """The ids hook :meth:`deferred.DeferredTracer.attach` takes, when there is no SDK to give ids to."""


def _untouched(line: bytes) -> tuple[bytes, None]:
    return line, None


def _relay(
    src: int, dst: int, handle: Any, max_line_bytes: int, on_end: Any, name: str, state: Any = None
) -> threading.Thread:
    from .framing import pump

    def run() -> None:
        try:
            pump(src, dst, handle, max_line_bytes, state)
        except OSError as exc:  # the destination is gone (EPIPE) or the source failed
            _logger().debug("acp_otel proxy: %s relay ended: %s", name, exc)
        except Exception:
            _logger().debug("acp_otel proxy: %s relay failed", name, exc_info=True)
        finally:
            on_end()

    thread = threading.Thread(target=run, name=f"acp-otel-{name}", daemon=True)
    thread.start()
    return thread


def run(options: ProxyOptions) -> int:
    """Run the proxy until the agent exits; returns the exit status (or re-raises the agent's signal)."""
    if not options.command:
        sys.stderr.write("acp-otel proxy: no agent command given (acp-otel proxy [options] -- CMD [ARGS...])\n")
        return 2
    signals = _Signals()  # before the spawn: a signal that arrives meanwhile is forwarded once the agent runs
    agent = _agent_telemetry(options)  # its socket bound before the spawn: the agent is told the address
    proc = _spawn(options.command, agent)
    if isinstance(proc, int):
        if agent is not None:
            agent.listener.close()
        return proc
    signals.started(proc)
    if agent is not None:
        agent.start()
    if options.verbose:  # otherwise in the set-up thread, if there is one (nothing logs without it)
        from .diagnostics import configure_logging

        configure_logging(True)
    assert proc.stdin is not None and proc.stdout is not None
    agent_in, agent_out = proc.stdin, proc.stdout
    tracing = None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() != "true":
        traces, metrics = bool(_exporter_names("OTEL_TRACES_EXPORTER")), bool(_exporter_names("OTEL_METRICS_EXPORTER"))
        if traces or metrics:
            tracing = _Tracing(options, traces, metrics, agent)
    to_agent_handler = tracing.handler(True) if tracing is not None else None
    to_editor_handler = tracing.handler(False) if tracing is not None else None

    def close_quietly(stream: Any) -> None:
        with contextlib.suppress(OSError):
            stream.close()

    _relay(
        0,  # the editor's stdin (a descriptor: sys.stdin may be None when fd 0 is closed)
        agent_in.fileno(),
        to_agent_handler,
        options.max_line_bytes,
        lambda: close_quietly(agent_in),  # editor's end of input -> the agent's
        "editor-to-agent",
    )
    from .framing import PumpState

    to_editor_state = PumpState()
    agent_out_lock = threading.Lock()  # _drain uses the descriptor only while it is open (never a reused one)

    def end_of_agent_output() -> None:
        with agent_out_lock:
            close_quietly(agent_out)  # editor gone: the agent sees a broken pipe, as without us

    to_editor = _relay(
        agent_out.fileno(),
        1,  # stdout: only the agent's bytes ever go here
        to_editor_handler,
        options.max_line_bytes,
        end_of_agent_output,
        "agent-to-editor",
        to_editor_state,
    )
    returncode = _wait(proc)
    # The telemetry's time after the agent's exit: the set-up (if still running) and, after a signal, the flush.
    deadline = time.monotonic() + signals.flush_timeout(options.flush_timeout_s)
    if tracing is not None:
        tracing.settle(deadline)
    _drain(to_editor, to_editor_state, agent_out, agent_out_lock, OUTPUT_DRAIN_TIMEOUT_S)
    if agent is not None:
        agent.finish_async(deadline)  # beside the proxy's own flush, within the same bound
    if tracing is not None:
        tracing.finish(returncode, signals, deadline)
    if agent is not None:
        agent.report()  # unless the proxy's exit line said it already
    if returncode < 0:
        _die_of(-returncode)
    return returncode


def _agent_telemetry(options: ProxyOptions) -> Any:
    """The agent's own telemetry (``--agent-telemetry``), its receiver's socket bound; ``None`` when off."""
    if not options.agent_telemetry or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    from . import agent_telemetry

    listener = agent_telemetry.bind()
    if listener is None:
        return None
    capture = options.settings_options.get("capture_content")
    if capture is None:
        capture = os.environ.get("OTEL_PYTHON_ACP_CAPTURE_CONTENT", "").strip().lower() in ("1", "true", "yes", "on")
    name = agent_telemetry.relay_name(options.service_name, options.command, os.environ)
    telemetry = agent_telemetry.AgentTelemetry(listener, name, bool(capture), options.command)
    telemetry.all_spans = options.agent_telemetry_spans == "all"
    return telemetry


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the agent's exit so that a forwarded signal's handler runs whenever the signal arrives.

    Python runs signal handlers in the main thread between bytecodes. Blocked in ``waitpid()``, the main
    thread would leave a signal for later when the kernel hands it to another thread (a relay's) or when
    it arrives just before the call: later is never, as the agent exits only once it has the signal (the
    editor sees a hang). So the main thread sleeps in ``select()`` on a pipe that the signal
    (``set_wakeup_fd``, written from whichever thread takes it) and the agent's exit (a waiting thread)
    both write to.
    """
    try:
        wake_r, wake_w = os.pipe()
    except OSError:
        return proc.wait()
    try:
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)  # set_wakeup_fd requires it
        try:
            previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        except ValueError:  # not the main thread, where no signal handler of ours runs anyway
            return proc.wait()
        try:

            def wait_for_exit() -> None:
                proc.wait()
                with contextlib.suppress(OSError):
                    os.write(wake_w, b"\0")

            waiter = threading.Thread(target=wait_for_exit, name="acp-otel-wait", daemon=True)
            waiter.start()
            while proc.poll() is None:  # None too while the waiter holds the wait: it writes once it is done
                select.select([wake_r], [], [])
                with contextlib.suppress(OSError):
                    os.read(wake_r, 4096)
            waiter.join()  # it may still be about to write: only then is wake_w closed
        finally:
            signal.set_wakeup_fd(previous)
    finally:
        os.close(wake_r)
        os.close(wake_w)
    return proc.returncode


def _drain(
    relay: threading.Thread,
    state: Any,
    agent_out: Any,
    lock: threading.Lock,
    idle_s: float,
    cap_s: float = OUTPUT_DRAIN_CAP_S,
) -> None:
    """After the agent's exit: let ``relay`` forward what the agent wrote, but not wait for end of file.

    The pipe is made non-blocking, so a relay that reads it empty ends there. One already blocked in a read
    of the empty pipe (a child of the agent holds it open) is woken by a signal (:data:`_WAKE_SIGNAL`, no-op
    handler): the read fails with EINTR, Python retries it, non-blocking now, and the relay ends. Where no
    handler can be installed (not the main thread), such a relay is left once seen waiting twice with no read
    in between. A relay that reads nothing for ``idle_s`` (the editor does not read) is left too, and any
    relay after ``cap_s``.
    """
    with lock, contextlib.suppress(OSError, ValueError):
        if not agent_out.closed:
            os.set_blocking(agent_out.fileno(), False)
    woken, previous = _wake_handler()
    try:
        now = time.monotonic()
        cap = now + cap_s
        idle_until = now + idle_s
        last_reads = state.reads
        idle_reads = -1  # the read count when the relay was last seen waiting on an empty pipe
        while relay.is_alive() and now < idle_until and now < cap:
            reads = state.reads
            if reads != last_reads:  # bytes arrived: the relay moves, the idle bound starts again
                last_reads = reads
                idle_until = now + idle_s
            if state.waiting and _unread_bytes(agent_out, lock) == 0:
                if woken:
                    # Harmless when the relay is not blocked in that read (a read it has just finished, data
                    # in hand, goes on; a write is retried): it ends by itself, the loop waits for that.
                    with contextlib.suppress(OSError, ValueError, AttributeError):
                        signal.pthread_kill(relay.ident, woken)  # type: ignore[arg-type]
                elif reads == idle_reads:
                    return  # seen waiting twice, with no read in between: blocked on an empty pipe
                idle_reads = reads
            else:
                idle_reads = -1
            relay.join(0.01)
            now = time.monotonic()
        if relay.is_alive():
            why = "nothing read" if now >= idle_until else "the cap reached"
            _logger().debug("acp_otel proxy: relaying the agent's output given up (%s)", why)
    finally:
        if woken:
            with contextlib.suppress(Exception):
                signal.signal(woken, previous)


# A signal whose default action is to be ignored: a stray one changes nothing.
_WAKE_SIGNAL = getattr(signal, "SIGURG", None)


def _wake_handler() -> tuple[int, Any]:
    """Install a no-op handler for :data:`_WAKE_SIGNAL`: the signal (0 when none could be installed) and the
    previous handler."""
    if _WAKE_SIGNAL is None or not hasattr(signal, "pthread_kill"):
        return 0, None
    try:
        # A handler set with signal.signal() interrupts system calls (siginterrupt(signum, True)).
        return _WAKE_SIGNAL, signal.signal(_WAKE_SIGNAL, _ignore_signal)
    except (ValueError, OSError):  # not the main thread
        return 0, None


def _ignore_signal(_signum: int, _frame: Any) -> None:
    """The wake signal's handler: only interrupting the relay's read matters."""


def _unread_bytes(stream: Any, lock: threading.Lock) -> int:
    """Bytes waiting in the pipe ``stream`` (0 when closed or when that cannot be told)."""
    try:
        import fcntl
        import struct
        import termios

        with lock:
            if stream.closed:
                return 0
            return int(struct.unpack("i", fcntl.ioctl(stream.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])
    except (ImportError, OSError, AttributeError, ValueError):
        return 0


def _die_of(signum: int) -> None:
    """Exit the way the agent did: by its signal (falls through when the signal does not kill us)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    with contextlib.suppress(Exception):  # SIGKILL's disposition cannot be set (nor needs to be)
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        os.kill(os.getpid(), signum)
    os._exit(128 + signum)
