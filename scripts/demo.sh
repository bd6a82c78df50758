#!/usr/bin/env bash
# Runs the traced demo on a fresh machine: creates .venv (Python 3.11), installs acp-otel with the
# ACP SDK, then runs `acp-otel demo` (an example client and agent, traced, shown as one waterfall).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# The SDK by name: the 'instruments' extra admits pre-releases (see acp_otel/package.py), so pip would pick one.
.venv/bin/python -m pip install -q -e . 'agent-client-protocol >= 0.8, < 2'
exec .venv/bin/acp-otel demo "$@"
