"""The example ACP agent and client that ``acp-otel demo`` runs (shipped in the wheel).

The repository's top-level ``examples/`` links to these files, so there is one copy to read and run.
Both are scripts, run by path (``python .../client.py``), not imported as modules of this package.
"""
