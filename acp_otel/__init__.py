"""OpenTelemetry tracing for the Agent Client Protocol (ACP) Python SDK.

``opentelemetry-instrument python agent.py`` picks this up with no code change; or, in code::

    from acp_otel import AcpInstrumentor
    AcpInstrumentor().instrument()
"""

from .instrumentor import AcpInstrumentor
from .version import __version__

__all__ = ["AcpInstrumentor", "__version__"]
