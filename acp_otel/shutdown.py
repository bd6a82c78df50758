"""No spans lost when the peer goes away: flush at end of input and on SIGTERM.

An editor ends a stdio agent by closing its stdin and, if it does not exit in time, terminating it
(the SDK's ``spawn_stdio_transport`` waits 2 s, sends SIGTERM, waits 2 s, kills). A batch span
processor holds spans for up to ``OTEL_BSP_SCHEDULE_DELAY``; SIGTERM's default action skips the SDK's
``atexit`` shutdown, so those spans would be lost. While instrumented:

* **End of input.** When a connection's receive loop ends because the peer closed the stream (not
  when the application closed the connection itself), the tracer provider is flushed
  (``force_flush``, at most :data:`FLUSH_TIMEOUT_S`) before the loop returns. This applies to every
  ``acp.connection.Connection`` (agent or client side): the flush runs in a helper thread, so the
  event loop keeps serving other connections meanwhile. The hook is ``Connection._receive_loop``,
  which every SDK release from 0.8 to 1.0rc3 has (``_disconnect`` only exists from 0.10.1).
* **SIGTERM.** When a receive loop starts in the main thread and SIGTERM still has its default
  disposition (``SIG_DFL``: the application installed no handler of its own), a handler is installed
  that flushes (bounded, in a helper thread so that a lock held by the interrupted code cannot
  deadlock it), restores ``SIG_DFL`` and sends SIGTERM to the process again: the process ends exactly
  as it would have (killed by SIGTERM, status -15 / 143). A second SIGTERM during the flush ends the
  process at once. POSIX only.

Uninstrumenting restores ``_receive_loop`` and, if our handler is still installed, ``SIG_DFL``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from typing import Any

import wrapt
from opentelemetry import trace

from .patching import Patches

_log = logging.getLogger("acp_otel")

FLUSH_TIMEOUT_S = 2.0
"""Upper bound of one flush: below the SDK's 2 s grace between closing stdin and SIGTERM, and between
SIGTERM and SIGKILL."""


class _State:
    __slots__ = ("tracer_provider",)

    def __init__(self, tracer_provider: Any) -> None:
        self.tracer_provider = tracer_provider


_state: _State | None = None
_patches = Patches()
_handler_installed = False


def install(tracer_provider: Any = None) -> None:
    """Flush ``tracer_provider`` (default: the global one at flush time) at end of input and on SIGTERM."""
    global _state
    _state = _State(tracer_provider)
    wrapt.register_post_import_hook(_patch_connection_module, "acp.connection")


def uninstall() -> None:
    """Stop flushing; restore ``Connection._receive_loop`` and the default SIGTERM disposition."""
    global _state, _handler_installed
    _state = None
    _patches.restore_all()
    if _handler_installed and threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _handler_installed = False
        except (ValueError, OSError):  # pragma: no cover - not in the main interpreter
            _log.debug("acp_otel: could not restore SIGTERM", exc_info=True)
    # From another thread the handler stays; uninstrumented it behaves exactly like SIG_DFL.


def _patch_connection_module(module: Any) -> None:
    if _state is None:
        return
    try:
        conn = module.Connection
        if "_receive_loop" in conn.__dict__:
            _patches.wrap(conn, "_receive_loop", _receive_loop)
    except Exception:
        _log.debug("acp_otel: could not hook the receive loop", exc_info=True)


# ------------------------------------------------------------------ flushing


def flush(timeout_s: float = FLUSH_TIMEOUT_S) -> bool:
    """Force-flush the tracer provider in use, waiting at most ``timeout_s``; ``True`` if it completed.

    The flush runs in a daemon thread, so that neither a slow exporter nor a lock held by the calling
    thread (when called from a signal handler) can block the caller longer than ``timeout_s``.
    """
    done = threading.Event()
    result: list[bool] = []
    worker = threading.Thread(target=_flush_now, args=(timeout_s, result, done), name="acp-otel-flush", daemon=True)
    worker.start()
    done.wait(timeout_s + 0.1)
    return bool(result and result[0])


def _provider() -> Any:
    state = _state
    provider = state.tracer_provider if state is not None else None
    return provider if provider is not None else trace.get_tracer_provider()


def _flush_now(timeout_s: float, result: list[bool], done: threading.Event) -> None:
    try:
        force_flush = getattr(_provider(), "force_flush", None)
        ok = bool(force_flush(int(timeout_s * 1000))) if callable(force_flush) else True
        result.append(ok)
    except Exception:
        _log.debug("acp_otel: flush failed", exc_info=True)
        result.append(False)
    finally:
        done.set()


async def _flush_async() -> None:
    # flush() is bounded and blocking: keep the event loop serving other connections meanwhile.
    if not await asyncio.to_thread(flush):
        _log.debug("acp_otel: flush at end of input did not complete within %.1fs", FLUSH_TIMEOUT_S)


async def _receive_loop(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if _state is not None:
        _install_sigterm_handler()
    result = await wrapped(*args, **kwargs)
    # Returning normally means end of input, or (0.8 - 0.12.x) a cancellation the loop swallowed
    # because the application closed the connection: flush only for the former.
    if _state is not None and not getattr(instance, "_closed", False):
        try:
            await _flush_async()
        except Exception:
            _log.debug("acp_otel: flush at end of input failed", exc_info=True)
    return result


# ------------------------------------------------------------------ SIGTERM


def _install_sigterm_handler() -> None:
    global _handler_installed
    if _handler_installed or os.name != "posix" or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
            _handler_installed = True
    except (ValueError, OSError):  # pragma: no cover - e.g. a sub-interpreter
        _log.debug("acp_otel: could not install a SIGTERM handler", exc_info=True)


def _on_sigterm(signum: int, frame: Any) -> None:
    global _handler_installed
    # First of all: a second SIGTERM while we flush ends the process at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _handler_installed = False
    if _state is not None:
        try:
            flush()
        except Exception:  # never let tracing change how the process ends
            pass
    os.kill(os.getpid(), signal.SIGTERM)
