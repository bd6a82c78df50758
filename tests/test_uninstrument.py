"""``uninstrument()`` leaves nothing behind that changes anything: no wrapped attribute, no attribute on a
live connection, no log filter, no SIGTERM handler, no post-import hook that still acts."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import wrapt
from acp_app import initialize, open_session, prompt
from opentelemetry.sdk.trace import TracerProvider
from spans import wait_until

from acp_otel import AcpInstrumentor
from acp_otel import _propagation as propagation
from acp_otel._instrumentor import PATCH_TABLE, SCHEMA_URL


def _patched_attributes() -> dict[tuple[str, str], Any]:
    """What each row of the patch table points at now (rows whose owner is absent on this release left out)."""
    import acp
    import acp.connection
    import acp.stdio
    import acp.transports  # noqa: F401 - the owners of the patch table

    found = {}
    for patch in PATCH_TABLE:
        owner = patch.resolve()
        if owner is not None and patch.attr in owner.__dict__:
            found[(patch.owner, patch.attr)] = owner.__dict__[patch.attr]
    return found


def _logger_filters() -> dict[str, list[logging.Filter]]:
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict))]
    return {logger.name: list(logger.filters) for logger in loggers}


def _our_attributes(side: Any) -> list[str]:
    """Our attribute names on a ``*SideConnection`` and on the ``acp.connection.Connection`` it holds."""
    from acp.connection import Connection

    objects = [side, *(v for v in vars(side).values() if isinstance(v, Connection))]
    return [name for obj in objects for name in vars(obj) if name.startswith("_acp_otel")]


async def _round_trip(p: Any) -> None:
    await initialize(p.client_conn)
    session_id = await open_session(p.client_conn)
    await prompt(p.client_conn, session_id, "hello")


async def test_uninstrument_leaves_nothing_behind(provider: TracerProvider, exporter: Any, pair: Any) -> None:
    # An engine used without the instrumentor (as the proxy and earlier tests use it) puts the propagators' log
    # filter on at its first extract, for the rest of the process: start from a process that never extracted.
    propagation.uninstall_log_filter()
    attributes, filters = _patched_attributes(), _logger_filters()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        p = await pair()
        await _round_trip(p)  # the agent extracts the client's context: the propagators' log filter goes on
        # While instrumented each of these differs, so the checks below can fail.
        changed = {key for key, now in _patched_attributes().items() if now is not attributes[key]}
        assert len(changed) == len(instrumentor._state.patches) >= 7  # connection hooks, receive loop, spawn
        assert _logger_filters() != filters
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        engine = instrumentor._state.engine
        assert engine is not None and engine._peers  # what it knows of the connections lives in the engine
    finally:
        instrumentor.uninstrument()

    assert _patched_attributes() == attributes and all(
        now is attributes[key] for key, now in _patched_attributes().items()
    )
    assert _logger_filters() == filters
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert _our_attributes(p.client_conn) == [] and _our_attributes(p.agent_conn) == []
    assert not engine._peers  # and is forgotten (Engine.shutdown)
    # The connections built while instrumented keep working, untraced and without trace context.
    exporter.clear()
    await _round_trip(p)
    assert exporter.get_finished_spans() == ()
    # (the SDK spreads _meta keys into handler keyword arguments: an injecting wrapper would show here)
    assert not {"traceparent", "tracestate", "baggage"} & set(p.agent.init_kwargs)


async def test_uninstrument_from_another_thread_restores_sigterm_on_the_main_thread(
    provider: TracerProvider, pair: Any
) -> None:
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        p = await pair()
        await initialize(p.client_conn)
        assert signal.getsignal(signal.SIGTERM) is instrumentor._state.sigterm_handler
    finally:
        # signal.signal() only works on the main thread: the event loop that installed the handler restores it.
        await asyncio.to_thread(instrumentor.uninstrument)
    await wait_until(lambda: signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, what="SIG_DFL restored")


async def test_flush_on_exit_off_wraps_no_receive_loop_and_installs_no_handler(
    provider: TracerProvider, pair: Any
) -> None:
    from acp.connection import Connection

    original = Connection.__dict__["_receive_loop"]
    instrumentor = AcpInstrumentor()
    instrumentor.instrument(tracer_provider=provider, flush_on_exit=False)
    try:
        assert instrumentor.settings is not None and instrumentor.settings.flush_on_exit is False
        p = await pair()
        await initialize(p.client_conn)  # both receive loops run on the main thread
        assert Connection.__dict__["_receive_loop"] is original
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert isinstance(Connection.__dict__["send_request"], wrapt.FunctionWrapper)  # the rest is traced
    finally:
        instrumentor.uninstrument()


async def test_tracer_carries_the_semantic_conventions_schema(instrument: Any, exporter: Any, pair: Any) -> None:
    p = await pair()
    await initialize(p.client_conn)
    spans = exporter.get_finished_spans()
    assert spans
    assert {(s.instrumentation_scope.name, s.instrumentation_scope.schema_url) for s in spans} == {
        ("acp_otel", SCHEMA_URL)
    }


def test_post_import_hooks_are_inert_after_uninstrument_and_registered_once() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        import wrapt
        from acp_otel import AcpInstrumentor

        instrumentor = AcpInstrumentor()
        for _ in range(3):  # each instrument() before acp is imported must not add another hook
            instrumentor.instrument()
            instrumentor.uninstrument()
        assert "acp" not in sys.modules
        import acp.connection, acp.transports
        inert = [
            isinstance(acp.connection.Connection.__dict__["send_request"], wrapt.FunctionWrapper),
            isinstance(acp.transports.spawn_stdio_transport, wrapt.FunctionWrapper),
        ]
        instrumentor.instrument()
        send = acp.connection.Connection.__dict__["send_request"]
        wrapped_once = isinstance(send, wrapt.FunctionWrapper)
        wrapped_once = wrapped_once and not isinstance(send.__wrapped__, wrapt.FunctionWrapper)
        instrumentor.uninstrument()
        print(json.dumps({"inert": inert, "wrapped_once": wrapped_once}))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"inert": [False, False], "wrapped_once": True}


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("0", False), ("true", True), ("", True)])
def test_flush_on_exit_from_the_environment(monkeypatch: Any, value: str, expected: bool) -> None:
    from acp_otel._settings import load_settings

    monkeypatch.setenv("OTEL_PYTHON_ACP_FLUSH_ON_EXIT", value)
    assert load_settings().flush_on_exit is expected


def test_a_copy_of_our_wrapper_is_unwrapped_and_a_foreign_wrapper_is_wrapped() -> None:
    from types import SimpleNamespace

    from acp_otel._patching import Patches

    def original(x: int) -> int:
        return x

    calls: list[str] = []

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        calls.append("ours")
        return wrapped(*args, **kwargs)

    def theirs(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        calls.append("theirs")
        return wrapped(*args, **kwargs)

    # Module-like owners: Patches reads and writes their attributes through __dict__ / setattr.
    home: Any = SimpleNamespace(f=original)
    user: Any = SimpleNamespace()
    other: Any = SimpleNamespace(f=wrapt.FunctionWrapper(original, theirs))  # another library's wrapper
    foreign = other.f
    patches = Patches()
    assert patches.wrap(home, "f", wrapper)
    user.f = home.f  # imported by name while patched: a copy of our wrapper
    patches.restore_all()
    assert home.f is original and isinstance(user.f, wrapt.FunctionWrapper)
    # Patched again: the copy is replaced by a wrapper of the original, not wrapped a second time.
    assert patches.wrap(home, "f", wrapper) and patches.wrap(user, "f", wrapper)
    assert user.f.__wrapped__ is original and user.f(3) == 3 and calls == ["ours"]
    # Another library's wrapper is kept under ours.
    assert patches.wrap(other, "f", wrapper) and other.f.__wrapped__ is foreign
    assert other.f(4) == 4 and calls == ["ours", "ours", "theirs"]
    patches.restore_all()
    assert home.f is original and user.f is original and other.f is foreign


def test_a_static_wrapper_calls_the_function_and_puts_it_back() -> None:
    """``static``: a module function is wrapped as a staticmethod (wrapt then calls the wrapper without looking
    for a ``__self__``); it is called with its arguments, its copies are recognised, the function is restored."""
    from types import SimpleNamespace

    from acp_otel._patching import Patches

    def original(x: int, *, y: int = 0) -> int:
        return x + y

    seen: list[Any] = []

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append(instance)
        return wrapped(*args, **kwargs)

    home: Any = SimpleNamespace(f=original)
    user: Any = SimpleNamespace()
    patches = Patches()
    assert patches.wrap(home, "f", wrapper, static=True)
    assert isinstance(home.f.__wrapped__, staticmethod) and home.f.__name__ == "original"
    assert home.f(2, y=3) == 5 and seen == [None]
    user.f = home.f  # a copy of our wrapper
    patches.restore_all()
    assert home.f is original
    assert patches.wrap(user, "f", wrapper, static=True)  # the copy: the function inside it is wrapped
    assert user.f.__wrapped__.__func__ is original and user.f(1) == 1
    patches.restore_all()
    assert user.f is original  # the function, not the staticmethod
