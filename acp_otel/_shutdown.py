"""No spans lost when the peer goes away: flush at end of input and on SIGTERM.

An editor ends a stdio agent by closing its stdin and, if it does not exit in time, terminating it
(the SDK's ``spawn_stdio_transport`` waits 2 s, sends SIGTERM, waits 2 s, kills). A batch span
processor holds spans for up to ``OTEL_BSP_SCHEDULE_DELAY``; SIGTERM's default action skips the SDK's
``atexit`` shutdown, so those spans would be lost. While instrumented:

* **End of input.** When a connection's receive loop ends because the peer closed the stream (not
  when the application closed the connection itself), the tracer provider is flushed
  (``force_flush``, at most :data:`FLUSH_TIMEOUT_S`, 1 s) before the loop returns. This applies to every
  ``acp.connection.Connection`` (agent or client side): the flush runs in a helper thread, so the
  event loop keeps serving other connections meanwhile. The hook is ``Connection._receive_loop``,
  which every SDK release from 0.8 to 1.0rc3 has (``_disconnect`` only exists from 0.10.1).
* **SIGTERM.** When a receive loop starts in the main thread and SIGTERM still has its default
  disposition (``SIG_DFL``: the application installed no handler of its own), a handler is installed
  that flushes (bounded, in a helper thread so that a lock held by the interrupted code cannot
  deadlock it), restores ``SIG_DFL`` and sends SIGTERM to the process again: the process ends exactly
  as it would have (killed by SIGTERM, status -15 / 143). A second SIGTERM during the flush ends the
  process at once. POSIX only.

Both are on by default and off with ``flush_on_exit=False`` (``OTEL_PYTHON_ACP_FLUSH_ON_EXIT=false``).

When a receive loop starts, console exporters writing to stdout are moved to stderr if the process is
served over its stdio (:mod:`acp_otel._stdout_guard`).

Uninstrumenting restores ``_receive_loop`` and, if our handler is still installed, ``SIG_DFL``. Only the
main thread may change a signal disposition: uninstrumenting from another thread asks the event loop
that installed the handler to restore ``SIG_DFL`` on the main thread; until that has run (or when that
loop no longer runs) the handler is inert, and inert it does exactly what ``SIG_DFL`` does: the
process ends, killed by SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from ._patching import Wrapper
from ._stdout_guard import guard_stdout

if TYPE_CHECKING:
    from ._state import InstrumentationState

_log = logging.getLogger("acp_otel")

FLUSH_TIMEOUT_S = 1.0
"""Upper bound of one flush: well below the SDK's 2 s grace between closing stdin and SIGTERM (and
between SIGTERM and SIGKILL) and ``acpx``'s 1.5 s between SIGTERM and SIGKILL, so that the flush never
makes an editor escalate."""

SIGTERM_NOT_FLUSHED = (
    f"acp_otel: telemetry: spans not exported within {FLUSH_TIMEOUT_S:g} s of SIGTERM were dropped "
    "(is the OTLP endpoint reachable?)\n"
)


# ------------------------------------------------------------------ flushing


def flush(tracer_provider: Any = None, timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
    """Force-flush ``tracer_provider`` (default: the global one), waiting at most ``timeout_s``.

    ``True`` if the flush completed. It runs in a daemon thread, so that neither a slow exporter nor a
    lock held by the calling thread (when called from a signal handler) can block the caller longer
    than ``timeout_s``.
    """
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    done = threading.Event()
    result: list[bool] = []
    worker = threading.Thread(
        target=_flush_now, args=(provider, timeout_s, result, done), name="acp-otel-flush", daemon=True
    )
    worker.start()
    done.wait(timeout_s + 0.1)
    return bool(result and result[0])


def _flush_now(provider: Any, timeout_s: float, result: list[bool], done: threading.Event) -> None:
    try:
        force_flush = getattr(provider, "force_flush", None)
        ok = bool(force_flush(int(timeout_s * 1000))) if callable(force_flush) else True
        result.append(ok)
    except Exception:
        _log.debug("acp_otel: flush failed", exc_info=True)
        result.append(False)
    finally:
        done.set()


def receive_loop_wrapper(state: InstrumentationState) -> Wrapper:
    """``Connection._receive_loop``: flush when the peer closed the stream; install the SIGTERM handler."""

    async def receive_loop(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if state.engine is not None:
            _install_sigterm_handler(state)
            guard_stdout(state.tracer_provider)  # console exporters off the protocol stream
        result = await wrapped(*args, **kwargs)
        # Returning normally means end of input, or (0.8 - 0.12.x) a cancellation the loop swallowed
        # because the application closed the connection: flush only for the former.
        if state.engine is not None and not getattr(instance, "_closed", False):
            try:
                # flush() is bounded and blocking: keep the event loop serving other connections meanwhile.
                if not await asyncio.to_thread(flush, state.tracer_provider):
                    _log.debug("acp_otel: flush at end of input did not complete within %.1fs", FLUSH_TIMEOUT_S)
            except Exception:
                _log.debug("acp_otel: flush at end of input failed", exc_info=True)
        return result

    return receive_loop


# ------------------------------------------------------------------ SIGTERM


def _install_sigterm_handler(state: InstrumentationState) -> None:
    if state.sigterm_installed or os.name != "posix" or threading.current_thread() is not threading.main_thread():
        return
    try:
        handler = state.sigterm_handler
        if handler is None:
            handler = state.sigterm_handler = _make_sigterm_handler(state)
        current = signal.getsignal(signal.SIGTERM)
        # Ours may still be there, inert, when uninstrument() ran in another thread.
        if current is signal.SIG_DFL or current is handler:
            signal.signal(signal.SIGTERM, handler)
            state.sigterm_installed = True
            state.sigterm_restore = _main_thread_caller()
    except (ValueError, OSError):  # pragma: no cover - e.g. a sub-interpreter
        _log.debug("acp_otel: could not install a SIGTERM handler", exc_info=True)


def _main_thread_caller() -> Callable[[Callable[[], None]], object] | None:
    """A way to run a callback on the main thread later: its running event loop, if any."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_soon_threadsafe


def _make_sigterm_handler(state: InstrumentationState) -> Callable[[int, Any], None]:
    def on_sigterm(signum: int, frame: Any) -> None:
        # First of all: a second SIGTERM while we flush ends the process at once.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        installed, state.sigterm_installed = state.sigterm_installed, False
        if installed and state.engine is not None:  # inert once uninstrumented
            try:
                if not flush(state.tracer_provider):
                    # os.write: a signal handler must not take the stderr buffer's lock.
                    os.write(2, SIGTERM_NOT_FLUSHED.encode())
            except Exception:  # never let tracing change how the process ends
                pass
        os.kill(os.getpid(), signal.SIGTERM)

    return on_sigterm


def restore_sigterm(state: InstrumentationState) -> None:
    """Put ``SIG_DFL`` back if our handler is installed (on the main thread now, or as soon as it can)."""
    if not state.sigterm_installed:
        return
    state.sigterm_installed = False  # inert from here on
    handler = state.sigterm_handler

    def restore() -> None:
        try:
            # Not if the application installed a handler of its own meanwhile, nor if we are instrumented again.
            if signal.getsignal(signal.SIGTERM) is handler and not state.sigterm_installed:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover - not in the main interpreter
            _log.debug("acp_otel: could not restore SIGTERM", exc_info=True)

    if threading.current_thread() is threading.main_thread():
        restore()
        return
    call_on_main_thread, state.sigterm_restore = state.sigterm_restore, None
    if call_on_main_thread is not None:
        try:
            call_on_main_thread(restore)
        except RuntimeError:  # that loop is closed: the handler stays, inert (SIG_DFL in effect)
            pass
