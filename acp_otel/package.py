"""What this instrumentation instruments, in the form ``opentelemetry-instrument`` checks."""

# "< 2.0.0a0" names a pre-release, which makes packaging (before 26, by its default rules) accept
# pre-releases such as 1.0.0rc3 in this range; "< 2" would not. Same string as pyproject's `instruments` extra.
_instruments = ("agent-client-protocol >= 0.8, < 2.0.0a0",)
