"""OpenTelemetry tracing for the Agent Client Protocol (ACP) Python SDK.

This module owns the public API, all of it: :class:`AcpInstrumentor` and ``__version__`` (every other module
of the package is internal, a leading ``_``, besides ``package`` and ``version``; the ``acp-otel`` command is
:mod:`acp_otel.cli`). ``opentelemetry-instrument python agent.py`` picks this up with no code change; or, in
code::

    from acp_otel import AcpInstrumentor
    AcpInstrumentor().instrument()
"""

from .version import __version__

# Not typing's: ``acp-otel proxy`` imports this package before it starts its agent, and typing is not needed
# at run time (type checkers treat any TYPE_CHECKING as true).
TYPE_CHECKING = False
if TYPE_CHECKING:  # type checkers see the class; at run time it is imported on first use (below)
    from ._instrumentor import AcpInstrumentor

__all__ = ["AcpInstrumentor", "__version__"]


def __getattr__(name: str) -> object:
    # Imported on first use: the instrumentor pulls in opentelemetry-instrumentation (~150 ms), which
    # `acp-otel proxy`, started by editors on every agent start, does not need.
    if name == "AcpInstrumentor":
        from ._instrumentor import AcpInstrumentor

        return AcpInstrumentor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
