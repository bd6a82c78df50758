"""Trace context in ``params._meta``: inject into a copy, extract and strip from incoming messages.

Pure functions over plain JSON values. They copy only the levels they change (the message, its
``params`` and ``_meta``), never the caller's objects, and never add a field at the root of ``params``.

The headers come from the globally configured propagator (``OTEL_PROPAGATORS``). When that is exactly
the default W3C pair (trace-context then baggage) the common cases take a fast path (see
:mod:`acp_otel._w3c_fast`) that gives the same headers and contexts at a fraction of the cost.

Also here: the log filter that keeps what the propagators say about a peer's malformed headers out of the
application's log, and the injectors / strippers for the ``extra_trace_keys`` setting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from contextvars import ContextVar
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span

from . import _otel_private as otel_private
from . import _w3c_fast as w3c_fast
from ._semconv import EXTRA_TRACE_KEY_SOURCES, RESERVED_META_KEYS

META = "_meta"

_log = logging.getLogger("acp_otel")


def carrier_for(context: Context | None, span: Span | None = None) -> dict[str, str]:
    """The trace headers the globally configured propagator writes for ``context``, or, when ``span`` is
    given, for ``trace.set_span_in_context(span, context)`` (without building that context on the fast path).

    A propagator that raises (a broken custom one) yields no headers: the message goes out as given.
    """
    try:
        fast = w3c_fast.for_propagator(propagate.get_global_textmap())
        if fast is not None:
            return fast.inject(context, span)
        if span is not None:
            context = trace.set_span_in_context(span, context)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=context)
    except Exception:
        _log.debug("acp_otel: propagator failed to inject", exc_info=True)
        return {}
    return carrier


def inject_context(params: Any, context: Context | None, span: Span | None = None) -> Any:
    """``inject_into_params(params, carrier_for(context, span))``: what the engine sends.

    The fast path is taken here rather than through :func:`carrier_for`: one call less per message.
    """
    fast = w3c_fast.for_propagator(propagate.get_global_textmap())
    if fast is None:
        return inject_into_params(params, carrier_for(context, span))
    try:
        carrier = fast.inject(context, span)
    except Exception:
        _log.debug("acp_otel: failed to inject", exc_info=True)
        return params
    if type(params) is dict and META not in params and carrier:  # no _meta yet (the usual case), written out
        new_params = dict(params)
        new_params[META] = carrier
        return new_params
    return inject_into_params(params, carrier)


def inject_into_params(params: Any, carrier: dict[str, str]) -> Any:
    """Return ``params`` with ``carrier`` merged into a copy of ``params._meta``.

    ``carrier`` (a fresh dict from :func:`carrier_for`) may become the new ``_meta`` itself.
    ``None`` becomes ``{"_meta": carrier}``. Params that are not an object, or whose ``_meta`` is not
    an object, are returned as given: we cannot add context to them without changing their meaning.
    Other ``_meta`` keys are kept; the caller's dicts are not modified.
    """
    if not carrier:
        return params
    if params is None:
        return {META: carrier}
    if type(params) is not dict:
        return params
    meta = params.get(META)
    if meta is None:
        new_meta = carrier
    elif type(meta) is dict:
        new_meta = dict(meta)
        new_meta.update(carrier)
    else:
        return params
    new_params = dict(params)
    new_params[META] = new_meta
    return new_params


class _PeerInputLogFilter(logging.Filter):
    """Demotes what the propagators log about a peer's malformed trace headers to our debug log.

    The W3C propagators log a WARNING for every oversized or malformed ``traceparent`` / ``tracestate``
    / ``baggage`` (echoing the peer's text). Coming from ``_meta`` of a peer's message, that would let
    any peer flood the application's logs; an uninstrumented application logs nothing. Only records
    emitted while we extract are affected.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not _EXTRACTING.get():
            return True
        _log.debug("acp_otel: ignored invalid trace context from peer: %s", record.getMessage()[:256])
        return False


_EXTRACTING: ContextVar[bool] = ContextVar("acp_otel_extracting", default=False)
_LOG_FILTER = _PeerInputLogFilter()


_log_filter_installed = False


def install_log_filter() -> None:
    """Put the filter on the propagators' loggers (``instrument()``; the first extract does it otherwise)."""
    # Filters stay on a logger through logging (re)configuration, so once per process is enough.
    global _log_filter_installed
    for name in otel_private.PROPAGATOR_LOGGERS:
        logging.getLogger(name).addFilter(_LOG_FILTER)
    _log_filter_installed = True


def uninstall_log_filter() -> None:
    """Take the filter off the propagators' loggers (``uninstrument()``); the next extract puts it back."""
    global _log_filter_installed
    for name in otel_private.PROPAGATOR_LOGGERS:
        logging.getLogger(name).removeFilter(_LOG_FILTER)
    _log_filter_installed = False


def context_from_carrier(carrier: dict[str, str] | None) -> Context:
    """Extract with the global propagator into an empty context (never the ambient one).

    Malformed headers and a propagator that raises give an empty context; what the propagators log
    about a peer's bad headers goes to our debug log, not the application's (see the filter above).
    """
    return extract_carrier(carrier)[0] if carrier else Context()


def extract_carrier(carrier: dict[str, str]) -> tuple[Context, bool | None]:
    """:func:`context_from_carrier`'s context, and whether it holds a valid span: ``True`` when the fast path
    parsed one into it, ``False`` when there is none, ``None`` when the real propagators decided (the caller
    must look). With :func:`strip_and_extract`, what the engine does with an incoming message."""
    fast = w3c_fast.for_propagator(propagate.get_global_textmap())
    if fast is not None and "baggage" not in carrier:
        # Calls no propagator, so logs nothing: no need for the log filter's flag.
        try:
            context = fast.extract(carrier)
        except Exception:
            _log.debug("acp_otel: failed to extract", exc_info=True)
            return Context(), False
        if context is not None:
            return context, True
        fast = None  # declined (an unusual or malformed header): only the real propagators, once
    if not _log_filter_installed:
        install_log_filter()
    token = _EXTRACTING.set(True)
    try:
        if fast is not None:  # baggage present: the real baggage propagator runs, and may log
            context = fast.extract(carrier)
            if context is not None:
                return context, True
        return propagate.extract(carrier, context=Context()), None
    except Exception:
        _log.debug("acp_otel: propagator failed to extract", exc_info=True)
        return Context(), False
    finally:
        _EXTRACTING.reset(token)


def strip_and_extract(message: Any, keys: Collection[str] = RESERVED_META_KEYS) -> tuple[Any, dict[str, str] | None]:
    """``(message without the trace keys, their string values)`` from ``params._meta``.

    The message is copied only down to ``_meta`` and only when there is something to strip. ``_meta`` is
    dropped when nothing else is left in it, so handlers without ``**kwargs`` keep working (the SDK
    spreads ``_meta`` keys into handler keyword arguments). The carrier is ``None`` when no trace key
    holds a string.
    """
    if type(message) is not dict:
        return message, None
    params = message.get("params")
    if type(params) is not dict:
        return message, None
    meta = params.get(META)
    if type(meta) is not dict:
        return message, None
    # One pass over _meta (usually just our traceparent); only string values are trace context, but the key
    # is stripped whatever its value.
    carrier: dict[str, str] | None = None
    present = 0
    for key, value in meta.items():
        if key in keys:
            present += 1
            if type(value) is str:
                if carrier is None:
                    carrier = {key: value}
                else:
                    carrier[key] = value
    if not present:
        return message, None
    new_params = dict(params)
    if present == len(meta):  # only trace keys (the usual case): no _meta left to build
        del new_params[META]
    else:
        new_params[META] = {k: v for k, v in meta.items() if k not in keys}
    return {**message, "params": new_params}, carrier


def propagator_fields() -> tuple[str, ...]:
    """The reserved keys plus any other keys the configured propagator reads (e.g. ``b3``)."""
    try:
        fields = propagate.get_global_textmap().fields
    except Exception:  # a broken custom propagator must not break the application
        fields = set()
    extra = tuple(sorted(f for f in fields if f not in RESERVED_META_KEYS))
    return RESERVED_META_KEYS + extra


# ------------------------------------------------------------------ extra trace-context keys
# Some agents that trace themselves read the context from keys of their own (Qwen Code:
# ``qwen.telemetry.traceparent``). With the ``extra_trace_keys`` setting the engine writes those beside the
# reserved keys, and strips them from what it receives; without it, the functions above run as they are.

Injector = Callable[[Any, "Context | None", "Span | None"], Any]
Stripper = Callable[[Any, Collection[str]], "tuple[Any, dict[str, str] | None]"]


def extra_key_injector(extra_keys: Collection[str]) -> Injector:
    """:func:`inject_context` that also writes each of ``extra_keys`` with the value of the reserved key it
    ends with (``...traceparent`` / ``...tracestate``), when the propagator wrote that one."""
    pairs = tuple((key, source) for key in extra_keys for source in EXTRA_TRACE_KEY_SOURCES if key.endswith(source))

    def inject(params: Any, context: Context | None, span: Span | None = None) -> Any:
        carrier = carrier_for(context, span)  # a fresh dict
        if carrier:
            for key, source in pairs:
                value = carrier.get(source)
                if value is not None:
                    carrier[key] = value
        return inject_into_params(params, carrier)

    return inject


def extra_key_stripper(extra_keys: Collection[str]) -> Stripper:
    """:func:`strip_and_extract` for keys that include ``extra_keys``: those are stripped from the message too,
    but only the others (the propagator's) make up the carrier."""
    extra = frozenset(extra_keys)

    def strip(message: Any, keys: Collection[str]) -> tuple[Any, dict[str, str] | None]:
        stripped, carrier = strip_and_extract(message, keys)
        if carrier is not None and not extra.isdisjoint(carrier):
            carrier = {k: v for k, v in carrier.items() if k not in extra} or None
        return stripped, carrier

    return strip
