"""Run an example (``examples/client.py`` or ``examples/agent.py``) instrumented, every span written to a file.

    python privacy_runner.py SPANFILE [--capture N] client|agent [example arguments...]

The spans are written whole (``ReadableSpan.to_json()``: attributes, events, links, status, resource), one
JSON document per line. Options are passed on the command line because the SDK starts agents with a
trimmed environment.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class WholeSpanExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self._path, "a", encoding="utf-8") as fh:
            for span in spans:
                fh.write(json.dumps(json.loads(span.to_json())) + "\n")
        return SpanExportResult.SUCCESS


def main(argv: list[str]) -> int:
    span_file, rest = argv[0], argv[1:]
    options = {}
    if rest[0] == "--capture":
        options = {"capture_content": True, "capture_content_max_length": int(rest[1])}
        rest = rest[2:]
    role, example_args = rest[0], rest[1:]
    provider = TracerProvider(resource=Resource.create({"service.name": f"privacy-{role}"}))
    provider.add_span_processor(SimpleSpanProcessor(WholeSpanExporter(span_file)))
    from acp_otel import AcpInstrumentor

    AcpInstrumentor().instrument(tracer_provider=provider, **options)
    spec = importlib.util.spec_from_file_location(f"example_{role}", EXAMPLES / f"{role}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    try:
        if role == "client":
            return asyncio.run(module.main(example_args))
        asyncio.run(module.main())
        return 0
    finally:
        provider.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
