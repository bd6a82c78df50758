"""The proxy's first lines, relayed before the engine is imported; the engine traces them afterwards.

An agent's start takes the machine's CPU (a Node agent compiles on both cores of a small machine), and the
engine's import (the OpenTelemetry API and acp-otel's modules, some 50 ms of CPU) made during it delays the
agent's answer to ``initialize``. So until the agent has written its first line, the proxy does not import the
engine: :class:`EarlyLines` relays the lines with the standard library alone and keeps them, with the times
they were relayed and the ids it chose, for the engine to trace once it is imported (the replay, in
:mod:`.process`), as if it had seen them then.

What it relays by itself, in the configuration it can stand in for (:func:`stand_in_for`):

* the editor's requests that set a session up (:data:`EARLY_METHODS`: ``initialize``, ``session/new``, ...;
  none of them is part of a turn): it makes the proxy span's context as the engine's early tracer would
  (:mod:`.deferred`: the editor's trace id or a random one, a random span id, the built-in sampler's decision
  from :func:`sampler_decision`) and writes its ``traceparent`` into the forwarded line (:mod:`.splice`, as the
  engine's path does); the replay makes the engine's span take those ids;
* responses, and lines the engine does not trace (not JSON, not an object, no method and no id): relayed as
  they are, the responses kept.

Any other line, or a request carrying anything but a plain W3C ``traceparent`` in ``_meta``, is not
decided here: the engine is imported at once and the line waits for it, as does every line after it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping

from .splice import splice_meta

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# A sampling decision from the parent's sampled flag (None: a root) and the trace id.
Decision = Callable[["bool | None", int], bool]

# The W3C trace-flags bits: sampled, and level 2's random trace id (set by the APIs that know it, see random_flag).
SAMPLED = 0x01
RANDOM_TRACE_ID = 0x02
_TRACE_ID_LIMIT = (1 << 64) - 1
# The editor's requests relayed here: what an editor sends before its first prompt (no turn, no session routing).
EARLY_METHODS = frozenset({"initialize", "authenticate", "session/new", "session/load"})
# A version-00 traceparent exactly as the W3C propagator writes it; anything else is the engine's to read.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# Settings that change what the engine writes into a message (acp_otel._settings' names; tests check they match).
INJECTION_SETTINGS = {
    "excluded_methods": "OTEL_PYTHON_ACP_EXCLUDED_METHODS",
    "inject": "OTEL_PYTHON_ACP_INJECT",
    "inject_excluded_methods": "OTEL_PYTHON_ACP_INJECT_EXCLUDED_METHODS",
    "extra_trace_keys": "OTEL_PYTHON_ACP_EXTRA_TRACE_KEYS",
}
# The propagators the engine's injection is the W3C trace context (and baggage, absent here) with.
_DEFAULT_PROPAGATORS = ("", "tracecontext,baggage")


def _ratio(environ: Mapping[str, str]) -> float:
    # As the SDK reads OTEL_TRACES_SAMPLER_ARG: a float in [0, 1], else 1.0.
    try:
        rate = float(environ.get("OTEL_TRACES_SAMPLER_ARG", ""))
    except ValueError:
        return 1.0
    return rate if 0.0 <= rate <= 1.0 else 1.0


def sampler_decision(environ: Mapping[str, str] | None = None) -> Decision | None:
    """The decision of the SDK's sampler for ``OTEL_TRACES_SAMPLER``, or ``None`` for a sampler this module
    does not reproduce (an unknown name or a plug-in)."""
    environ = os.environ if environ is None else environ
    name = environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").lower()
    parent_based = name.startswith("parentbased_")
    root_name = name[len("parentbased_") :] if parent_based else name
    root: Callable[[int], bool]
    if root_name == "always_on":
        root = lambda _trace_id: True  # noqa: E731
    elif root_name == "always_off":
        root = lambda _trace_id: False  # noqa: E731
    elif root_name == "traceidratio":
        bound = round(_ratio(environ) * (_TRACE_ID_LIMIT + 1))
        root = lambda trace_id: trace_id & _TRACE_ID_LIMIT < bound  # noqa: E731
    else:
        return None

    def decide(parent_sampled: bool | None, trace_id: int) -> bool:
        if parent_based and parent_sampled is not None:
            return parent_sampled  # ParentBased's defaults: follow the parent, remote or local
        return root(trace_id)

    return decide


def random_flag() -> int | None:
    """:data:`RANDOM_TRACE_ID` when the installed OpenTelemetry API knows the flag (its SDK then sets it on
    the trace ids it makes), 0 when it does not, ``None`` when that cannot be told without importing it.

    Read from the API's source rather than by importing it (that import is what is kept off the start);
    ``tests/test_proxy_startup.py`` checks the answer against the imported API's ``TraceFlags``.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("opentelemetry.trace")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "span.py"), "rb") as f:
            source = f.read()
    except OSError:
        return None
    return RANDOM_TRACE_ID if b"RANDOM_TRACE_ID = 0x02" in source else 0


def stand_in_for(
    settings_options: Mapping[str, Any], environ: Mapping[str, str] | None = None, extra_keys: tuple[str, ...] = ()
) -> EarlyLines | None:
    """An :class:`EarlyLines` for this configuration, or ``None`` when the engine must decide every line
    (traces on with a sampler, propagators or settings this module does not reproduce). ``extra_keys``: the
    agent's own trace-parent keys the engine will write (``--agent-telemetry``), written here the same way."""
    environ = os.environ if environ is None else environ
    if environ.get("OTEL_PROPAGATORS", "").replace(" ", "").lower() not in _DEFAULT_PROPAGATORS:
        return None
    for option, variable in INJECTION_SETTINGS.items():
        if option in settings_options or environ.get(variable, "").strip():
            return None
    decide = sampler_decision(environ)
    flag = random_flag()
    if decide is None or flag is None:
        return None
    return EarlyLines(decide, flag, extra_keys)


def _random_id(size: int) -> int:
    # Random, as the SDK's RandomIdGenerator's, never the invalid 0; from os.urandom: `random` is not imported yet.
    while True:
        value = int.from_bytes(os.urandom(size), "big")
        if value:
            return value


class Early:
    """A line relayed before the engine existed: what the engine needs to trace it as it would have then."""

    __slots__ = ("forwarded", "ids", "line", "monotonic", "time_ns", "to_agent")

    def __init__(self, to_agent: bool, line: bytes, forwarded: bytes, ids: tuple[int, int] | None) -> None:
        self.to_agent = to_agent
        self.line = line
        self.forwarded = forwarded  # what the editor or the agent received
        self.ids = ids  # (trace id, span id) of the span the engine must start for it
        self.time_ns = time.time_ns()
        self.monotonic = time.monotonic()


class EarlyLines:
    """Relays the lines it can decide (see the module) and keeps them in order for the engine.

    Not thread-safe: the proxy calls :meth:`relay` and reads :attr:`kept` under one lock.
    """

    def __init__(self, decide: Decision, random_flag: int, extra_keys: tuple[str, ...] = ()) -> None:
        self._decide = decide
        self._random_flag = random_flag
        # As the engine's extra-key injector: each ``...traceparent`` key gets the traceparent, after it (no
        # tracestate is written here); a request that carries one of them is the engine's to strip.
        self._extra_keys = extra_keys
        self._extra_parents = tuple(k for k in extra_keys if k.endswith("traceparent"))
        self.kept: list[Early] = []

    def relay(self, to_agent: bool, line: bytes) -> bytes | None:
        """The bytes to forward for ``line``, or ``None`` when the engine must decide it."""
        try:
            text = line.decode("utf-8")
            message = json.loads(text)
        except (ValueError, RecursionError):  # the engine relays these as they are, and traces nothing
            return line
        if type(message) is not dict:
            return line
        method = message.get("method")
        if method is None:
            if "id" in message and ("result" in message or "error" in message):
                self.kept.append(Early(to_agent, line, line, None))  # a response: it ends a span
            return line
        if not (to_agent and method in EARLY_METHODS and "id" in message):
            return None
        return self._request(line, text, message)

    def _request(self, line: bytes, text: str, message: dict[str, Any]) -> bytes | None:
        params = message.get("params")
        if type(params) is not dict:
            return None
        meta = params.get("_meta")
        parent: tuple[int, int] | None = None  # the editor's trace id and trace flags
        if meta is not None:
            if type(meta) is not dict or "tracestate" in meta or "baggage" in meta:
                return None
            if any(key in meta for key in self._extra_keys):
                return None
            header = meta.get("traceparent")
            if header is not None:
                match = _TRACEPARENT.fullmatch(header) if type(header) is str else None
                if match is None:
                    return None
                trace_id, span_id = int(match[1], 16), int(match[2], 16)
                if not trace_id or not span_id:
                    return None
                parent = (trace_id, int(match[3], 16))
        trace_id = parent[0] if parent is not None else _random_id(16)
        sampled = self._decide(bool(parent[1] & SAMPLED) if parent is not None else None, trace_id)
        span_id = _random_id(8)
        flags = SAMPLED if sampled else 0
        if self._random_flag:  # as deferred._flags: a root's ids are random, a child keeps its parent's word
            flags |= self._random_flag if parent is None else parent[1] & self._random_flag
        traceparent = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
        try:
            carrier = {"traceparent": traceparent}
            for key in self._extra_parents:
                carrier[key] = traceparent
            forwarded = splice_meta(text, carrier).encode("utf-8")
        except Exception:  # a shape the splice did not expect: the engine's path decides what to do
            return None
        self.kept.append(Early(True, line, forwarded, (trace_id, span_id)))
        return forwarded
