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
.venv/bin/python -m pip install -q -e '.[instruments]'
exec .venv/bin/acp-otel demo "$@"
