"""The instrumentation state: everything ``instrument()`` sets up, shared by the instrumentor and every wrapper.

Its own module so that the SDK adapters (``_sdk_adapter``, ``_remote``, ``_spawn``, ``_shutdown``) can read the
state without importing the instrumentor that imports them: the layering reads top-down (instrumentor, then
the adapters, then this state, then the engine). What is wrapped is listed in the instrumentor's ``PATCH_TABLE``;
the registry of what was applied (:class:`~acp_otel._patching.Patches`) lives here, in :attr:`patches`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._patching import Patches

if TYPE_CHECKING:
    from opentelemetry import trace

    from ._engine import Engine
    from ._settings import Settings


class InstrumentationState:
    """Everything ``instrument()`` sets up, read by every wrapper; emptied by ``uninstrument()``.

    One object for the life of the process: releases before 0.12.1 keep the bound hooks a connection
    was built with, so wrappers applied by an earlier ``instrument()`` must see a later one's engine,
    and pass straight through while ``engine`` is ``None``.
    """

    __slots__ = (
        "engine",
        "hooked",
        "patches",
        "settings",
        "sigterm_handler",
        "sigterm_installed",
        "sigterm_restore",
        "spawned",
        "tracer",
        "tracer_provider",
    )

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.settings: Settings | None = None
        self.tracer: trace.Tracer | None = None
        self.tracer_provider: Any = None  # None: the global provider at flush time
        self.patches = Patches()
        # Modules with our post-import hook: wrapt cannot unregister one, so each is registered once
        # per process and does nothing while uninstrumented.
        self.hooked: set[str] = set()
        # Our SIGTERM handler (made once), whether it is installed, and how to put SIG_DFL back from
        # the main thread when uninstrument() runs elsewhere (see _shutdown.py).
        self.sigterm_handler: Callable[[int, Any], None] | None = None
        self.sigterm_installed = False
        self.sigterm_restore: Callable[[Callable[[], None]], object] | None = None
        # The command line of each agent spawned through the SDK, by the writer of its stdio transport, until
        # the connection built on it takes it (its agent profile: _sdk_adapter's init).
        self.spawned: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()
