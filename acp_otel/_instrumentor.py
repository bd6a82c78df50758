"""``AcpInstrumentor``: the entry point that ``opentelemetry-instrument`` and applications use.

It owns the one table of what is wrapped (:data:`PATCH_TABLE`, rows :class:`Patch`) and the process's one
:class:`~acp_otel._state.InstrumentationState`; ``_sdk_adapter``, ``_remote``, ``_spawn`` and ``_shutdown`` only
provide the wrappers (they read the state from :mod:`acp_otel._state`, never this module). ``instrument()``
applies the table; everything ``uninstrument()`` undoes is listed in :meth:`AcpInstrumentor._uninstrument`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import wrapt
from opentelemetry import trace

# The module opens with a file-wide "type: ignore", so mypy sees none of its names.
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from . import _propagation as propagation
from . import _remote as remote
from . import _sdk_adapter as sdk_adapter
from . import _shutdown as shutdown
from . import _spawn as spawn
from ._engine import Engine
from ._metrics import make_instruments
from ._patching import Wrapper
from ._semconv import SCHEMA_URL
from ._settings import Settings, load_settings
from ._state import InstrumentationState
from .package import _instruments
from .version import __version__

_log = logging.getLogger("acp_otel")

INSTRUMENTATION_NAME = "acp_otel"


@dataclass(frozen=True)
class Patch:
    """One attribute that ``instrument()`` wraps (a row of :data:`PATCH_TABLE`).

    ``owner`` is ``"module"`` or ``"module:Class"``; it is patched once ``hook_module`` is imported.
    ``make_wrapper(state)`` builds the wrapper, which reads ``state`` on every call. The row is skipped
    when the owner has no ``attr``, when it (or ``unless_owner``, when given) has ``unless`` (a newer hook
    that replaces this one), or when the setting named by ``option`` is off. ``static``: a module function
    called on every message (see :meth:`~acp_otel._patching.Patches.wrap`).
    """

    hook_module: str
    owner: str
    attr: str
    make_wrapper: Callable[[InstrumentationState], Wrapper]
    unless: str | None = None
    unless_owner: str | None = None
    option: str | None = None
    static: bool = False

    def resolve(self) -> Any:
        """The owning module or class, or ``None`` when its module is not imported (yet) or ``unless`` says
        a newer hook replaces this one."""
        owner = _resolve(self.owner)
        if owner is None or self.unless is None:
            return owner
        replaced_in = owner if self.unless_owner is None else _resolve(self.unless_owner)
        return None if replaced_in is None or self.unless in replaced_in.__dict__ else owner


def _resolve(owner: str) -> Any:
    module_name, _, class_name = owner.partition(":")
    module = sys.modules.get(module_name)
    return getattr(module, class_name, None) if module is not None and class_name else module


_CONNECTION = "acp.connection:Connection"
# acp/__init__ imports acp.transports and acp.stdio (0.8 - 1.0rc3), so the hook on "acp" sees all three
# owners of the spawn function: its home module, the module that calls it by its imported name
# (spawn_agent_process, spawn_client_process, spawn_stdio_connection) and the package.
_SPAWN = "spawn_stdio_transport"

PATCH_TABLE: tuple[Patch, ...] = (
    # Every message in and out of a connection (sdk_adapter).
    Patch("acp.connection", _CONNECTION, "__init__", sdk_adapter.init_wrapper),
    Patch("acp.connection", _CONNECTION, "send_request", sdk_adapter.send_request_wrapper),
    Patch("acp.connection", _CONNECTION, "send_notification", sdk_adapter.send_notification_wrapper),
    Patch("acp.connection", _CONNECTION, "_execute_request", sdk_adapter.execute_request_wrapper),  # 0.12.1+
    Patch(
        "acp.connection", _CONNECTION, "_run_request", sdk_adapter.run_request_wrapper, unless="_execute_request"
    ),  # up to 0.12.0
    Patch(  # up to 0.12.0: the response's send ends the SERVER span (see sdk_adapter.response_send_wrapper)
        "acp.connection",
        "acp.task.sender:MessageSender",
        "send",
        sdk_adapter.response_send_wrapper,
        unless="_execute_request",
        unless_owner=_CONNECTION,
    ),
    Patch("acp.connection", _CONNECTION, "_run_notification", sdk_adapter.run_notification_wrapper),
    Patch("acp.connection", _CONNECTION, "close", sdk_adapter.close_wrapper),
    Patch("acp.connection", "acp.connection", "span_context", sdk_adapter.sdk_span_context_wrapper, static=True),
    # Flush at end of input; installs the SIGTERM handler (shutdown).
    Patch("acp.connection", _CONNECTION, "_receive_loop", shutdown.receive_loop_wrapper, option="flush_on_exit"),
    # Spawned agents: an acp.spawn span and the OpenTelemetry environment (spawn).
    Patch("acp", "acp.transports", _SPAWN, spawn.spawn_wrapper),
    Patch("acp", "acp.stdio", _SPAWN, spawn.spawn_wrapper),
    Patch("acp", "acp", _SPAWN, spawn.spawn_wrapper),
    # Remote transports (SDK 1.0, extra "http"; remote): the HTTP request carrying a message under its span, the
    # POST's context for a message without its own, the connection's id and peer. Modules stdio never imports.
    *(Patch(m, _CONNECTION, "_run_request", remote.run_request_wrapper) for m in remote.REMOTE_MODULES),
    Patch("acp.http.asgi", "acp.http.asgi", "_post", remote.post_wrapper),
    Patch("acp.http.asgi", "acp.http.asgi", "handle_websocket", remote.handle_websocket_wrapper),
    Patch("acp.http.server", "acp.http.server:_HttpTransport", "deliver_to_agent", remote.deliver_wrapper),
    Patch("acp.http.client", "acp.http.client:_HttpStreamTransport", "_open_stream", remote.open_stream_wrapper),
)


class AcpInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Traces the ACP Python SDK (``agent-client-protocol``) with OpenTelemetry.

    ``AcpInstrumentor().instrument(tracer_provider=None, **options)`` starts tracing every
    ``acp.connection.Connection`` (whether ``acp`` is imported before or after the call);
    ``uninstrument()`` restores the SDK exactly; ``meter_provider`` (default: the global one) receives the
    metrics. Options (keyword arguments win over the
    ``OTEL_PYTHON_ACP_*`` environment variables; see the README's options table):
    ``excluded_methods``, ``capture_content``, ``capture_content_max_length``, ``keep_sdk_spans``,
    ``notification_spans``, ``tool_spans``, ``max_events_per_span``, ``propagate_env``, ``inject``,
    ``inject_excluded_methods``, ``flush_on_exit``.
    """

    # BaseInstrumentor is a singleton, so this is the process's one state object.
    _state = InstrumentationState()

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    @property
    def settings(self) -> Settings | None:
        """The settings in force while instrumented, else ``None``."""
        return self._state.settings

    def _instrument(self, **kwargs: Any) -> None:
        state = self._state
        tracer_provider = kwargs.pop("tracer_provider", None)
        meter_provider = kwargs.pop("meter_provider", None)  # None: the global one
        settings = load_settings(kwargs)
        tracer = trace.get_tracer(INSTRUMENTATION_NAME, __version__, tracer_provider, schema_url=SCHEMA_URL)
        state.tracer_provider = tracer_provider
        state.settings = settings
        state.tracer = tracer
        state.engine = Engine(tracer, settings, make_instruments(meter_provider, __version__))
        propagation.install_log_filter()  # a peer's malformed trace headers go to our debug log
        for module_name in dict.fromkeys(p.hook_module for p in PATCH_TABLE):
            if module_name in sys.modules:
                self._apply(module_name)
            if module_name not in state.hooked:
                # Runs at once when the module is already imported (then wrapping is a no-op), else on import.
                wrapt.register_post_import_hook(self._on_import, module_name)
                state.hooked.add(module_name)

    def _on_import(self, module: Any) -> None:
        if self._state.engine is not None:  # inert while uninstrumented
            self._apply(module.__name__)

    def _apply(self, module_name: str) -> None:
        state = self._state
        for patch in PATCH_TABLE:
            if patch.hook_module != module_name:
                continue
            if patch.option is not None and not getattr(state.settings, patch.option):
                continue
            try:
                owner = patch.resolve()
                if owner is None:
                    continue
                state.patches.wrap(owner, patch.attr, patch.make_wrapper(state), patch.static)
            except Exception:
                _log.debug("acp_otel: could not patch %s.%s", patch.owner, patch.attr, exc_info=True)

    def _uninstrument(self, **kwargs: Any) -> None:
        state = self._state
        engine = state.engine
        state.engine = None  # from here on every wrapper still referenced passes straight through
        state.settings = None
        state.tracer = None
        state.tracer_provider = None
        state.patches.restore_all()  # every row of PATCH_TABLE that was applied
        shutdown.restore_sigterm(state)  # SIG_DFL again (from another thread: see shutdown.py)
        propagation.uninstall_log_filter()  # the filter on the propagators' loggers
        if engine is not None:
            engine.shutdown()  # open tool calls and v2 turns end; the engine forgets every connection
