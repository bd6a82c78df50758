"""Run the agent under the proxy: spawn, relay both ways, forward signals, pass on the exit status.

Lifecycle (docs/proxy-lifecycle.md has the whole story):

* the agent is started first, in a process group of its own (so that a signal reaches all of it, as a
  terminal's Ctrl-C would) and, on Linux, set to be killed if the proxy dies (``PR_SET_PDEATHSIG``), so
  that it never outlives a SIGKILLed proxy; telemetry is configured while it starts;
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
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from .._child_env import proxy_agent_environment
from .options import DiagnosticFormatter, ProxyOptions

_log = logging.getLogger("acp_otel")

FORWARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
# After the agent exits, at most this long relaying what it wrote (only an editor that stops reading
# makes it last; end of file is not waited for: a child of the agent may hold the pipe open for ever).
OUTPUT_DRAIN_TIMEOUT_S = 0.25
# The flush after a forwarded signal: the SDK's editor SIGKILLs 2 s after its SIGTERM, acpx 1.5 s.
SIGNAL_FLUSH_BUDGET_S = 1.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _configure_logging(verbose: bool) -> None:
    # Without a handler, logging's last resort would print library warnings (e.g. export retries
    # against a dead endpoint) on stderr; diagnostics appear only when asked for.
    for name in ("acp_otel", "opentelemetry"):
        logger = logging.getLogger(name)
        logger.propagate = False
        if verbose:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(DiagnosticFormatter())
            logger.addHandler(handler)
            logger.setLevel(logging.DEBUG)
        else:
            logger.addHandler(logging.NullHandler())
    if not verbose:
        import warnings

        warnings.simplefilter("ignore")


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


def _spawn(command: tuple[str, ...]) -> subprocess.Popen[bytes] | int:
    try:
        env = proxy_agent_environment(os.environ, command)  # see acp_otel._child_env: what the agent inherits
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
    """Forwards SIGTERM, SIGINT and SIGHUP to the agent's process group while the agent runs."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.forwarded = False  # a signal reached the agent: the editor is waiting for the proxy's exit
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self._forward)

    def _forward(self, signum: int, _frame: Any) -> None:
        if self.proc.returncode is not None:
            return  # the agent has exited; what stays of its group stays, as it would without the proxy
        self.forwarded = True
        _log.debug("acp_otel proxy: forwarding signal %d to the agent's process group", signum)
        try:
            os.killpg(self.proc.pid, signum)  # the agent leads its own group (see _child_setup)
        except (ProcessLookupError, PermissionError, AttributeError):
            with contextlib.suppress(ProcessLookupError, OSError):
                self.proc.send_signal(signum)

    def flush_timeout(self, configured_s: float) -> float:
        """The flush bound: ``configured_s``, cut to :data:`SIGNAL_FLUSH_BUDGET_S` after a forwarded signal."""
        return min(configured_s, SIGNAL_FLUSH_BUDGET_S) if self.forwarded else configured_s


def _build_tracer(options: ProxyOptions) -> tuple[Any, Any]:
    """The telemetry and the message tracer (``None`` when tracing is off); never raises."""
    try:
        from .._child_env import proxy_service_name
        from .._settings import load_settings
        from . import telemetry

        derived = options.service_name or proxy_service_name(options.command)
        tel = telemetry.configure(derived, explicit_service_name=options.service_name is not None)
        if not tel.enabled:
            return tel, None
        from .._engine import Engine
        from .tracing import MessageTracer

        settings = load_settings(options.settings_options)
        engine = Engine(tel.tracer(), settings, _metric_instruments(tel))
        tracer = MessageTracer(engine)
        engine.note_agent_command(tracer.peer, options.command)  # the agent profile, until initialize names it
        return tel, tracer
    except Exception:
        _log.debug("acp_otel proxy: tracing disabled, setup failed", exc_info=True)
        return None, None


def _metric_instruments(tel: Any) -> Any:
    """The engine's metric instruments on the proxy's meter provider (built only when metrics export)."""
    meter_provider = tel.add_meter_provider()
    if meter_provider is None:
        return None
    from .._metrics import make_instruments
    from ..version import __version__

    return make_instruments(meter_provider, __version__)


def _relay(
    src: int, dst: int, handle: Any, max_line_bytes: int, on_end: Any, name: str, state: Any = None
) -> threading.Thread:
    from .framing import pump

    def run() -> None:
        try:
            pump(src, dst, handle, max_line_bytes, state)
        except OSError as exc:  # the destination is gone (EPIPE) or the source failed
            _log.debug("acp_otel proxy: %s relay ended: %s", name, exc)
        except Exception:
            _log.debug("acp_otel proxy: %s relay failed", name, exc_info=True)
        finally:
            on_end()

    thread = threading.Thread(target=run, name=f"acp-otel-{name}", daemon=True)
    thread.start()
    return thread


def run(options: ProxyOptions) -> int:
    """Run the proxy until the agent exits; returns the exit status (or re-raises the agent's signal)."""
    _configure_logging(options.verbose)
    if not options.command:
        sys.stderr.write("acp-otel proxy: no agent command given (acp-otel proxy [options] -- CMD [ARGS...])\n")
        return 2
    proc = _spawn(options.command)
    if isinstance(proc, int):
        return proc
    signals = _Signals(proc)
    assert proc.stdin is not None and proc.stdout is not None
    agent_in, agent_out = proc.stdin, proc.stdout
    tel, tracer = _build_tracer(options)
    to_agent_handler = to_editor_handler = None
    if tracer is not None:
        from .tracing import Direction

        to_agent_handler = tracer.handler(Direction.EDITOR_TO_AGENT)
        to_editor_handler = tracer.handler(Direction.AGENT_TO_EDITOR)

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
    returncode = proc.wait()
    _drain(to_editor, to_editor_state, agent_out, agent_out_lock, OUTPUT_DRAIN_TIMEOUT_S)
    if tracer is not None:
        how = f"signal {-returncode}" if returncode < 0 else f"status {returncode}"
        tracer.close(f"agent exited with {how}")
    if tel is not None:
        # Bounded (tighter after a forwarded signal); says in one line what could not be exported.
        tel.finish(signals.flush_timeout(options.flush_timeout_s))
    if returncode < 0:
        _die_of(-returncode)
    return returncode


def _drain(relay: threading.Thread, state: Any, agent_out: Any, lock: threading.Lock, limit_s: float) -> None:
    """After the agent's exit: let ``relay`` forward what the agent wrote, but not wait for end of file.

    The pipe is made non-blocking, so a relay that reads it empty ends there; one already blocked in a
    read of the empty pipe (a child of the agent holds it open) has nothing in hand, and is left.
    """
    with lock, contextlib.suppress(OSError, ValueError):
        if not agent_out.closed:
            os.set_blocking(agent_out.fileno(), False)
    deadline = time.monotonic() + limit_s
    idle_reads = -1  # the read count when the relay was last seen waiting on an empty pipe
    while relay.is_alive() and time.monotonic() < deadline:
        reads = state.reads
        if state.waiting and _unread_bytes(agent_out, lock) == 0:
            if reads == idle_reads:
                return  # seen waiting twice, with no read in between: blocked on an empty pipe
            idle_reads = reads
        else:
            idle_reads = -1
        relay.join(0.01)


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
