"""What a JSON-RPC method name alone decides for its messages, worked out once per name.

Its start attributes, whether settings exclude it or keep trace context out of it, what it is to a turn
(:data:`._turns.ROLE_UPDATE` and the others) and its request-duration metric attributes. The engine looks the
name up in :attr:`MethodTable.cache` on every message and asks :meth:`MethodTable.info` only on a miss.
"""

from __future__ import annotations

from typing import Any

from . import _semconv as sc
from ._metrics import Instruments
from ._settings import Settings
from ._turns import ROLE_OTHER, ROLE_PERMISSION, ROLE_SERVING, ROLE_UPDATE

# Bounded like MethodMatcher's cache: a hostile peer can invent endless method names.
_METHOD_CACHE_SIZE = 1024


class MethodInfo:
    """What depends on a method name alone."""

    __slots__ = ("attributes", "inject", "is_update", "metric_name", "request_attributes", "traced", "turn_role")

    def __init__(
        self,
        attributes: dict[str, Any],
        traced: bool,
        inject: bool,
        turn_role: int,
        metric_name: str,
        request_attributes: dict[str, str],
    ) -> None:
        # The start attributes that depend on the name alone (copied per span, never handed out).
        self.attributes = attributes
        self.traced = traced  # not excluded by settings
        self.inject = inject  # context may be injected into outgoing messages of this method
        self.turn_role = turn_role  # what a message of this method is to its session's turn (_turns.ROLE_*)
        self.is_update = turn_role == ROLE_UPDATE
        self.metric_name = metric_name  # acp.method.name in metrics: bounded (_OTHER)
        self.request_attributes = request_attributes  # of a request-duration record without error


class MethodTable:
    """The :class:`MethodInfo` of each method name seen (at most ``_METHOD_CACHE_SIZE`` kept)."""

    def __init__(self, settings: Settings, instruments: Instruments | None) -> None:
        self._settings = settings
        self._instruments = instruments
        # Read directly on the per-message path (``cache.get(method) or info(method)``): a dict lookup, where
        # working the facts out again costs pattern matches and several dicts per message. Measured as in
        # _context_facts (the engine alone, sampled, turn mode): without it, +76k instructions per turn at K = 1,
        # +775k at K = 20 (about 18k per message).
        self.cache: dict[str, MethodInfo] = {}

    def info(self, method: str) -> MethodInfo:
        """Work out (and cache) what depends on the method name; callers looked in the cache first."""
        settings = self._settings
        attributes: dict[str, Any] = {
            sc.RPC_SYSTEM_NAME: sc.RPC_SYSTEM_VALUE,
            sc.JSONRPC_PROTOCOL_VERSION: sc.JSONRPC_VERSION,
            sc.ACP_METHOD_NAME: method,
        }
        if sc.is_extension(method):
            attributes[sc.ACP_EXTENSION] = True
            namespace = sc.extension_namespace(method)
            if namespace is not None:
                attributes[sc.ACP_EXTENSION_NAMESPACE] = namespace
        if method == sc.SESSION_PROMPT:
            attributes[sc.GEN_AI_OPERATION_NAME] = sc.INVOKE_AGENT
        if method == sc.SESSION_UPDATE:
            role = ROLE_UPDATE
        elif method == sc.SESSION_REQUEST_PERMISSION:
            role = ROLE_PERMISSION
        elif method.startswith(sc.TOOL_SERVING_PREFIXES):
            role = ROLE_SERVING
        else:
            role = ROLE_OTHER
        inject = settings.inject and not sc.is_protocol_method(method)
        inject = inject and not settings.inject_excluded_methods(method)
        instruments = self._instruments
        metric_name = instruments.method_name(method) if instruments is not None else method
        info = MethodInfo(
            attributes,
            traced=not settings.excluded_methods(method),
            inject=bool(inject),
            turn_role=role,
            metric_name=metric_name,
            request_attributes=instruments.request_attributes(metric_name, None) if instruments is not None else {},
        )
        if len(self.cache) < _METHOD_CACHE_SIZE:
            self.cache[method] = info
        return info
