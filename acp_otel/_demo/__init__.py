"""Demo helpers for acp-otel: an embedded OTLP trace receiver, a terminal waterfall and OTLP JSON files.

Nothing here is needed to *emit* telemetry; these modules let ``acp-otel demo`` and the integration
tests receive real OTLP exports on loopback and show them without Docker or a collector.
"""
