"""Agents spawned through the SDK inherit the OpenTelemetry configuration and get a span of their own.

The SDK starts every stdio child (``spawn_agent_process``, ``spawn_client_process``,
``spawn_stdio_connection``, all through ``acp.transports.spawn_stdio_transport``) with a trimmed
environment (``default_environment()``: HOME, LOGNAME, PATH, SHELL, TERM, USER, plus the caller's
``env=``), so neither ``OTEL_*`` nor the ``PYTHONPATH`` entry that ``opentelemetry-instrument`` relies
on reach the child. While instrumented (and ``propagate_env`` is on) the child additionally gets:

* every ``OTEL_*`` variable of this process, except ``console`` in the exporter lists (the child's
  stdout is the protocol);
* the directory of opentelemetry's ``sitecustomize`` as ``PYTHONPATH`` when this process runs under
  ``opentelemetry-instrument`` and the child runs the same interpreter in the same environment (that
  entry is all the auto-instrumentation needs, besides ``OTEL_*``), never for ``acp-otel proxy``;
* ``OTEL_SERVICE_NAME`` derived from the command (:func:`service_name_for_command`; none for
  ``acp-otel proxy``, which names itself and its agent), with ``service.name`` removed from an
  inherited ``OTEL_RESOURCE_ATTRIBUTES``;
* ``TRACEPARENT`` / ``TRACESTATE`` / ``BAGGAGE`` for the spawn span (the OpenTelemetry convention for
  environment variables as context carriers: the propagator's keys, upper-cased).

Variables the caller passes in ``env=`` always win: an explicit ``OTEL_SERVICE_NAME`` (or a
``service.name`` in an explicit ``OTEL_RESOURCE_ATTRIBUTES``) stops the derivation, an explicit
``PYTHONPATH`` is kept as given.

The spawn itself is an INTERNAL span ``acp.spawn`` (a local operation: the child's ACP spans hang off
the CLIENT spans of the requests sent to it, not off this span) from just before the process is
created until it runs, with ``process.executable.name``, ``process.pid`` and, only when content
capture is on, ``process.command_args``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import _child_env as ce
from . import _propagation as propagation
from . import _semconv as sc
from ._patching import Wrapper
from ._settings import Settings

if TYPE_CHECKING:
    from ._state import InstrumentationState

_log = logging.getLogger("acp_otel")

ENV_SERVICE_NAME = ce.ENV_SERVICE_NAME
ENV_RESOURCE_ATTRIBUTES = ce.ENV_RESOURCE_ATTRIBUTES
ENV_PYTHONPATH = ce.ENV_PYTHONPATH
service_name_for_command = ce.service_name_for_command
_basename = ce._basename


def auto_instrumentation_dir() -> str | None:
    """The directory of opentelemetry's ``sitecustomize`` (what ``opentelemetry-instrument`` puts on ``PYTHONPATH``)."""
    try:
        from opentelemetry.instrumentation import auto_instrumentation
    except Exception:
        return None
    path = getattr(auto_instrumentation, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if path else None


def env_carrier(carrier: Mapping[str, str]) -> dict[str, str]:
    """Propagator headers as environment variables: ``traceparent`` -> ``TRACEPARENT`` (non-alphanumerics -> ``_``)."""
    return {re.sub(r"[^A-Za-z0-9]", "_", key).upper(): value for key, value in carrier.items()}


def child_environment(
    command: str,
    args: Sequence[str],
    caller_env: Mapping[str, str] | None,
    parent_environ: Mapping[str, str],
    trace_env: Mapping[str, str] | None = None,
    sitecustomize_dir: str | None = None,
    this_executable: str | None = None,
) -> dict[str, str]:
    """The ``env=`` to hand the SDK's spawn: OpenTelemetry variables for the child, then the caller's.

    ``parent_environ`` is this process's environment, ``trace_env`` the ``TRACEPARENT``-style variables
    of the spawn span and ``sitecustomize_dir`` opentelemetry's auto-instrumentation directory (added as
    ``PYTHONPATH`` only when it is on ``parent_environ["PYTHONPATH"]`` and the child runs this
    interpreter, ``this_executable`` (default ``sys.executable``), in the same environment). The
    caller's variables win.
    """
    caller = dict(caller_env or {})
    env: dict[str, str] = {k: v for k, v in parent_environ.items() if k.startswith("OTEL_")}
    ce.no_console(env)
    if (
        sitecustomize_dir
        and _on_python_path(sitecustomize_dir, parent_environ.get(ENV_PYTHONPATH))
        and ce.sitecustomize_belongs(command, args, this_executable or sys.executable, parent_environ.get("PATH"))
    ):
        env[ENV_PYTHONPATH] = sitecustomize_dir
    caller_names_service = ENV_SERVICE_NAME in caller or ce.has_service_name(caller.get(ENV_RESOURCE_ATTRIBUTES))
    if caller_names_service or ce.proxy_agent_command(command, args) is not None:
        # The caller named the service (an inherited OTEL_SERVICE_NAME would override their resource
        # attribute), or the child is acp-otel proxy, which names itself and its agent.
        env.pop(ENV_SERVICE_NAME, None)
    else:
        env[ENV_SERVICE_NAME] = service_name_for_command(command, args)
    if ENV_RESOURCE_ATTRIBUTES in env:
        remaining = ce.without_service_name(env[ENV_RESOURCE_ATTRIBUTES])
        if remaining:
            env[ENV_RESOURCE_ATTRIBUTES] = remaining
        else:
            del env[ENV_RESOURCE_ATTRIBUTES]
    env.update(trace_env or {})
    env.update(caller)
    ce.no_console(env)  # whatever the caller says: the child's stdout is the protocol
    return env


def _on_python_path(directory: str, python_path: str | None) -> bool:
    if not python_path:
        return False
    target = os.path.normcase(os.path.realpath(directory))
    return any(entry and os.path.normcase(os.path.realpath(entry)) == target for entry in python_path.split(os.pathsep))


# ------------------------------------------------------------------ the wrapper


def _bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, tuple[str, ...], Any]:
    command = args[0] if args else kwargs.get("command", "")
    return str(command), tuple(str(a) for a in args[1:]), kwargs.get("env")


def spawn_wrapper(state: InstrumentationState) -> Wrapper:
    """``spawn_stdio_transport``: an ``acp.spawn`` span and the OpenTelemetry environment for the child."""

    def spawn(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        settings, tracer = state.settings, state.tracer
        if settings is None or tracer is None or not args:
            return wrapped(*args, **kwargs)
        return _traced_spawn(tracer, settings, wrapped, args, kwargs, state.spawned)

    return spawn


@contextlib.asynccontextmanager
async def _traced_spawn(
    tracer: trace.Tracer,
    settings: Settings,
    wrapped: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    spawned: MutableMapping[Any, tuple[str, ...]],
) -> AsyncIterator[Any]:
    span = None
    command: str = ""
    cmd_args: tuple[str, ...] = ()
    try:
        command, cmd_args, caller_env = _bind(args, kwargs)
        if is_instrumentation_enabled():
            attributes: dict[str, Any] = {sc.PROCESS_EXECUTABLE_NAME: _basename(command)}
            if settings.capture_content:
                attributes[sc.PROCESS_COMMAND_ARGS] = [command, *cmd_args]
            span = tracer.start_span(sc.SPAWN_SPAN_NAME, kind=SpanKind.INTERNAL, attributes=attributes)
        if settings.propagate_env:
            ctx = trace.set_span_in_context(span) if span is not None else None
            trace_env = env_carrier(propagation.carrier_for(ctx)) if span is not None else {}
            kwargs = {
                **kwargs,
                "env": child_environment(
                    command, cmd_args, caller_env, os.environ, trace_env, auto_instrumentation_dir()
                ),
            }
    except Exception:
        _log.debug("acp_otel: could not prepare the spawn span or environment", exc_info=True)

    async with contextlib.AsyncExitStack() as stack:
        try:
            streams = await stack.enter_async_context(wrapped(*args, **kwargs))
        except BaseException as exc:
            if span is not None:
                span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                span.end()
            raise
        try:  # the connection built on this transport looks up the agent's profile by its command
            if command and isinstance(streams, tuple) and len(streams) > 1:
                spawned[streams[1]] = (command, *cmd_args)
        except TypeError:  # a writer that cannot be weakly referenced: no profile by command
            pass
        if span is not None:
            try:
                process = streams[2] if isinstance(streams, tuple) and len(streams) > 2 else None
                pid = getattr(process, "pid", None)
                if isinstance(pid, int):
                    span.set_attribute(sc.PROCESS_PID, pid)
            finally:
                span.end()
        yield streams
