"""Which SDK release the tests run against, and a skip for tests that cannot hold on some releases."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.specifiers import SpecifierSet

SDK_VERSION = version("agent-client-protocol")
"""The installed ``agent-client-protocol`` release (``acp``)."""


def sdk_matches(spec: str) -> bool:
    """Whether the installed SDK release is in ``spec`` (pre-releases such as 1.0.0rc3 included)."""
    return SpecifierSet(spec).contains(SDK_VERSION, prereleases=True)


def requires_sdk(spec: str, reason: str) -> pytest.MarkDecorator:
    """Skip a test (or module, as ``pytestmark``) unless the installed SDK is in ``spec``, saying why."""
    return pytest.mark.skipif(not sdk_matches(spec), reason=f"agent-client-protocol {SDK_VERSION}: {reason}")


# Releases where a test cannot hold, and why (shared by the tests that depend on the same behaviour).
EXAMPLES_IMPORT = requires_sdk(
    ">=0.9", reason="the examples import acp.schema.FileSystemCapabilities (0.8 names it FileSystemCapability)"
)
PENDING_REJECTED_AT_EOF = requires_sdk(
    ">=0.10.1",
    reason="requests still pending when the peer goes away are rejected only from 0.10.1 (Connection._disconnect); "
    "0.8 and 0.9 leave them pending forever, traced or not",
)
READS_ON_AFTER_BAD_LINE = requires_sdk(
    ">=0.11",
    reason="0.8.1 and 0.9.0 stop reading after a non-object line, an error member that is not an object or an "
    "over-long line (the next request is never answered, traced or not); holds from 0.11.1 (0.10.x is not in "
    "the matrix)",
)
EXAMPLES_TRANSCRIPT = requires_sdk(
    ">=0.12.1",
    reason="before 0.12.1 the SDK may run the turn's last session/update handler after the prompt's response "
    "(0.9.0 and 0.11.1 do), so the example client's transcript is not in the order these tests check",
)
PROMPT_SPAN_ENDS_BEFORE_RESPONSE = requires_sdk(
    ">=0.12.1",
    reason="up to 0.12.0 an agent's SERVER span ends only after _run_request has written the response, so a "
    "SIGTERM right after the client reads it can come before the span ends (then no flush can export it)",
)
REMOTE_TRANSPORTS = requires_sdk(
    ">=1.0.0rc3",
    reason="the Streamable HTTP and WebSocket transports (acp.http, acp.ws, extra 'http') first ship in 1.0.0rc3",
)


# -- OpenTelemetry releases (pyproject.toml allows API/SDK from 1.27, instrumentation from 0.48b0: nox -s floors)


def otel_matches(distribution: str, spec: str) -> bool:
    """Whether the installed ``distribution`` (an OpenTelemetry package) is in ``spec``."""
    return SpecifierSet(spec).contains(version(distribution), prereleases=True)


def requires_otel(distribution: str, spec: str, reason: str) -> pytest.MarkDecorator:
    """Skip a test unless the installed OpenTelemetry ``distribution`` is in ``spec``, saying why."""
    return pytest.mark.skipif(
        not otel_matches(distribution, spec), reason=f"{distribution} {version(distribution)}: {reason}"
    )


PER_HISTOGRAM_BUCKETS = requires_otel(
    "opentelemetry-sdk",
    ">=1.32",
    reason="the OTLP export carries each histogram's advisory buckets from 1.32 (the API has the advisory from 1.30; "
    "1.30 ignores it, 1.31 gives every histogram the first one's buckets); counts and sums are right on every release",
)
DEAD_GRPC_ENDPOINT_GIVES_UP = requires_otel(
    "opentelemetry-exporter-otlp-proto-grpc",
    ">=1.35",
    reason="before 1.35 the OTLP/gRPC exporter retries an endpoint that does not answer gRPC (nothing listening, an "
    "HTTP port) with back-off for about a minute, whatever its timeout: the batch is still pending at exit",
)
CHILDREN_OUTSIDE_SPAWN_AUTO_INSTRUMENTED = requires_otel(
    "opentelemetry-instrumentation",
    ">=0.63b0",
    reason="before 0.63b0 opentelemetry-instrument takes its sitecustomize directory off PYTHONPATH as it starts, "
    "so a Python child started other than through the SDK's spawn is not auto-instrumented",
)
