"""A registry of the attributes we wrap, so that uninstrumenting puts back exactly what was there."""

from __future__ import annotations

import logging
from typing import Any

import wrapt

_log = logging.getLogger("acp_otel")

_MISSING = object()


class Patches:
    """Wraps attributes with wrapt and restores the original objects, never stacking wrappers."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attr: str, wrapper: Any) -> bool:
        """Wrap ``owner.attr`` (a class or module attribute) once; ``False`` when it is missing."""
        # Read the raw attribute (a plain function for a class, not a bound or static method).
        original = owner.__dict__.get(attr, _MISSING) if hasattr(owner, "__dict__") else _MISSING
        if original is _MISSING:
            return False
        if any(o is owner and a == attr for o, a, _ in self._saved):
            return True
        wrapt.wrap_function_wrapper(owner, attr, wrapper)
        self._saved.append((owner, attr, original))
        return True

    def is_wrapped(self, owner: Any, attr: str) -> bool:
        return any(o is owner and a == attr for o, a, _ in self._saved)

    def restore_all(self) -> None:
        """Put every original attribute back, newest first."""
        while self._saved:
            owner, attr, original = self._saved.pop()
            try:
                setattr(owner, attr, original)
            except Exception:  # pragma: no cover - setattr on a class or module does not fail in practice
                _log.debug("acp_otel: could not restore %r.%s", owner, attr, exc_info=True)
