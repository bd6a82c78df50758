"""Wrapping with wrapt and putting back exactly what was there: the registry (:class:`Patches`) of what
``instrument()`` applied, and the shape of a wrapper (:data:`Wrapper`).

What is wrapped is the instrumentor's ``PATCH_TABLE``; this module knows nothing of the SDK or of the state.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from typing import Any, TypeGuard

import wrapt

_log = logging.getLogger("acp_otel")

_MISSING = object()

Wrapper = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]
"""A wrapt wrapper: ``wrapper(wrapped, instance, args, kwargs)``."""


# Set on our wrapper functions, so that a copy of one of our wrappers (a function imported by name from a
# module we had patched) is recognised and never wrapped twice. A mark on the wrapper function rather than
# a FunctionWrapper subclass: wrapt binds a subclass's methods on a slower path (about 60 % more per call).
_MARK = "_acp_otel_wrapper"


def _is_ours(obj: object) -> TypeGuard[wrapt.FunctionWrapper[..., Any]]:
    return isinstance(obj, wrapt.FunctionWrapper) and getattr(obj._self_wrapper, _MARK, False) is True


class Patches:
    """Wraps attributes and restores the original objects, never stacking wrappers."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, wrapper: Wrapper, static: bool = False) -> bool:
        """Wrap ``owner.attr`` (a class or module attribute) once; ``False`` when it is missing.

        ``static``: ``owner.attr`` is a plain function, called as such. It is wrapped as a ``staticmethod``
        (callable, and carrying the function's ``__wrapped__``, name and doc, since Python 3.10): wrapt calls
        the wrapper of a plain function only after looking for a bound ``__self__``, an AttributeError raised
        and cleared on every call (about 3k instructions), and skips that look for a staticmethod.
        """
        if any(o is owner and a == attr for o, a, _ in self._saved):
            return True
        # Read the raw attribute (a plain function for a class, not a bound or static method).
        original = owner.__dict__.get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if original is _MISSING:
            return False
        target: Any = original
        if _is_ours(original):  # a copy of our own wrapper: wrap what it wraps (uninstrument puts that back)
            target = original.__wrapped__
            if isinstance(target, staticmethod):  # ours, static (below)
                target = target.__func__
        setattr(wrapper, _MARK, True)
        inner = staticmethod(target) if static and isinstance(target, types.FunctionType) else target
        setattr(owner, attr, wrapt.FunctionWrapper(inner, wrapper))
        self._saved.append((owner, attr, target))
        return True

    def restore_all(self) -> None:
        """Put every original attribute back, newest first."""
        while self._saved:
            owner, attr, original = self._saved.pop()
            try:
                setattr(owner, attr, original)
            except Exception:  # pragma: no cover - setattr on a class or module does not fail in practice
                _log.debug("acp_otel: could not restore %r.%s", owner, attr, exc_info=True)

    def __len__(self) -> int:
        return len(self._saved)
