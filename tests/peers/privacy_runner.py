"""Run an example (``examples/client.py`` or ``examples/agent.py``) instrumented, every span written to a file.

    python tests/peers/privacy_runner.py SPANFILE [--capture N] client|agent [example arguments...]

The spans are written whole (``ReadableSpan.to_json()``: attributes, events, links, status, resource), one
JSON document per line. Options are passed on the command line because the SDK starts agents with a
trimmed environment.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

# Started by the SDK with a trimmed environment (no PYTHONPATH): find the support modules.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))

from span_file_exporter import JsonLinesExporter, make_provider, whole_span

from acp_otel._demo.traced_client import load_client

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def main(argv: list[str]) -> int:
    span_file, rest = argv[0], argv[1:]
    options = {}
    if rest[0] == "--capture":
        options = {"capture_content": True, "capture_content_max_length": int(rest[1])}
        rest = rest[2:]
    role, example_args = rest[0], rest[1:]
    provider = make_provider(JsonLinesExporter(span_file, record=whole_span), f"privacy-{role}")
    from acp_otel import AcpInstrumentor

    AcpInstrumentor().instrument(tracer_provider=provider, **options)
    module = load_client(EXAMPLES / f"{role}.py")  # imports any example module (client or agent)
    try:
        if role == "client":
            return asyncio.run(module.main(example_args))
        asyncio.run(module.main())
        return 0
    finally:
        provider.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
