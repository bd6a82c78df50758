"""The package version (read by pyproject.toml and reported as the tracer's version)."""

__version__ = "0.1.0"
