"""Trace context in ``params._meta``: inject into a copy, extract and strip from incoming messages.

Pure functions over plain JSON values. They copy only the levels they change (the message, its
``params`` and ``_meta``), never the caller's objects, and never add a field at the root of ``params``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry import propagate
from opentelemetry.context import Context

from .semconv import RESERVED_META_KEYS

META = "_meta"


def carrier_for(context: Context | None) -> dict[str, str]:
    """The trace headers the globally configured propagator writes for ``context``."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


def inject_into_params(params: Any, carrier: dict[str, str]) -> Any:
    """Return ``params`` with ``carrier`` merged into a copy of ``params._meta``.

    ``None`` becomes ``{"_meta": carrier}``. Params that are not an object, or whose ``_meta`` is not
    an object, are returned as given: we cannot add context to them without changing their meaning.
    Other ``_meta`` keys are kept; the caller's dicts are not modified.
    """
    if not carrier:
        return params
    if params is None:
        return {META: dict(carrier)}
    if type(params) is not dict:
        return params
    meta = params.get(META)
    if meta is None:
        new_meta = dict(carrier)
    elif type(meta) is dict:
        new_meta = dict(meta)
        new_meta.update(carrier)
    else:
        return params
    new_params = dict(params)
    new_params[META] = new_meta
    return new_params


def extract_carrier(message: Any, keys: Iterable[str] = RESERVED_META_KEYS) -> dict[str, str] | None:
    """The string-valued trace headers in ``message.params._meta``; ``None`` when there are none."""
    if type(message) is not dict:
        return None
    params = message.get("params")
    if type(params) is not dict:
        return None
    meta = params.get(META)
    if type(meta) is not dict:
        return None
    carrier = None
    for key in keys:
        value = meta.get(key)
        if type(value) is str:
            if carrier is None:
                carrier = {}
            carrier[key] = value
    return carrier


def context_from_carrier(carrier: dict[str, str] | None) -> Context:
    """Extract with the global propagator into an empty context (never the ambient one)."""
    if not carrier:
        return Context()
    return propagate.extract(carrier, context=Context())


def strip_message(message: Any, keys: Iterable[str] = RESERVED_META_KEYS) -> Any:
    """Return ``message`` without the trace keys in ``params._meta`` (a shallow copy where changed).

    ``_meta`` is dropped when nothing else is left in it, so handlers without ``**kwargs`` keep working
    (the SDK spreads ``_meta`` keys into handler keyword arguments). Messages with nothing to strip are
    returned as they are.
    """
    if type(message) is not dict:
        return message
    params = message.get("params")
    if type(params) is not dict:
        return message
    meta = params.get(META)
    if type(meta) is not dict:
        return message
    present = [key for key in keys if key in meta]
    if not present:
        return message
    new_meta = {k: v for k, v in meta.items() if k not in present}
    new_params = dict(params)
    if new_meta:
        new_params[META] = new_meta
    else:
        del new_params[META]
    new_message = dict(message)
    new_message["params"] = new_params
    return new_message


def propagator_fields() -> tuple[str, ...]:
    """The reserved keys plus any other keys the configured propagator reads (e.g. ``b3``)."""
    try:
        fields = propagate.get_global_textmap().fields
    except Exception:  # a broken custom propagator must not break the application
        fields = set()
    extra = tuple(sorted(f for f in fields if f not in RESERVED_META_KEYS))
    return RESERVED_META_KEYS + extra
