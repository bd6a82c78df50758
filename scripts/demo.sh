#!/usr/bin/env bash
# Runs the traced demo on a fresh machine: creates .venv (the first of Python 3.11, 3.12, 3.13, 3.10 found;
# PYTHON=... overrides), installs acp-otel with the ACP SDK (only the first time, or when pyproject.toml
# changed), then runs `acp-otel demo` (an example client and agent, traced, shown as one waterfall).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
# The SDK by name: the 'instruments' extra admits pre-releases (see acp_otel/package.py), so pip would pick one.
ensure_venv demo -e . 'agent-client-protocol >= 0.8, < 2'
exec .venv/bin/acp-otel demo "$@"
