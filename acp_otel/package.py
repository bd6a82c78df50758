"""What this instrumentation instruments, in the form ``opentelemetry-instrument`` checks."""

_instruments = ("agent-client-protocol >= 0.8, < 2",)
