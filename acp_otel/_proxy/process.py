"""Run the agent under the proxy: spawn, relay both ways, forward signals, pass on the exit status.

Lifecycle:

* the agent is started first and telemetry is configured while it starts (imports overlap its start-up);
* end of the editor's input closes the agent's stdin; the agent's exit ends the proxy: the agent's
  remaining output is relayed (bounded wait), pending spans end with an error, spans are flushed
  (bounded), and the proxy exits with the agent's status or dies of the signal that killed it;
* SIGTERM, SIGINT and SIGHUP are forwarded to the agent (the proxy then waits for it to exit);
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
from typing import Any

from .._child_env import proxy_agent_environment
from .options import DiagnosticFormatter, ProxyOptions

_log = logging.getLogger("acp_otel")

FORWARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))
# After the agent exits, how long its stdout may stay open (a child of the agent holding it).
OUTPUT_DRAIN_TIMEOUT_S = 2.0


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


def _spawn(command: tuple[str, ...]) -> subprocess.Popen[bytes] | int:
    try:
        env = proxy_agent_environment(os.environ, command)  # see acp_otel._child_env: what the agent inherits
        return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env)
    except FileNotFoundError:
        sys.stderr.write(f"acp-otel proxy: {command[0]}: command not found\n")
        return 127
    except PermissionError:
        sys.stderr.write(f"acp-otel proxy: {command[0]}: permission denied\n")
        return 126
    except OSError as exc:
        sys.stderr.write(f"acp-otel proxy: {command[0]}: {exc.strerror or exc}\n")
        return 126


def _forward_signals(proc: subprocess.Popen[bytes]) -> None:
    def forward(signum: int, _frame: Any) -> None:
        _log.debug("acp_otel proxy: forwarding signal %d to the agent", signum)
        with contextlib.suppress(ProcessLookupError, OSError):
            proc.send_signal(signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)


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
        return tel, MessageTracer(Engine(tel.tracer(), settings, _metric_instruments(tel)))
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


def _relay(src: int, dst: int, handle: Any, max_line_bytes: int, on_end: Any, name: str) -> threading.Thread:
    from .framing import pump

    def run() -> None:
        try:
            pump(src, dst, handle, max_line_bytes)
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
    _forward_signals(proc)
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
    to_editor = _relay(
        agent_out.fileno(),
        1,  # stdout: only the agent's bytes ever go here
        to_editor_handler,
        options.max_line_bytes,
        lambda: close_quietly(agent_out),  # editor gone: the agent sees a broken pipe, as without us
        "agent-to-editor",
    )
    returncode = proc.wait()
    to_editor.join(OUTPUT_DRAIN_TIMEOUT_S)
    if tracer is not None:
        how = f"signal {-returncode}" if returncode < 0 else f"status {returncode}"
        tracer.close(f"agent exited with {how}")
    if tel is not None:
        tel.finish(options.flush_timeout_s)  # bounded; says in one line what could not be exported
    if returncode < 0:
        _die_of(-returncode)
    return returncode


def _die_of(signum: int) -> None:
    """Exit the way the agent did: by its signal (falls through when the signal does not kill us)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    with contextlib.suppress(Exception):  # SIGKILL's disposition cannot be set (nor needs to be)
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        os.kill(os.getpid(), signum)
    os._exit(128 + signum)
