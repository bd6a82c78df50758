#!/usr/bin/env bash
# Runs the test suite on a fresh machine: creates .venv (the first of Python 3.11, 3.12, 3.13, 3.10 found;
# PYTHON=... overrides), installs the package with its test extras from this repository's pyproject.toml
# (only the first time, or when pyproject.toml changed), then runs pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
ensure_venv test -e '.[test]'
exec .venv/bin/python -m pytest "$@"
