#!/usr/bin/env bash
# Runs the test suite on a fresh machine: creates .venv (the first of Python 3.11, 3.12, 3.13, 3.10 found;
# PYTHON=... overrides), installs the package with its test extras from this repository's pyproject.toml
# (only the first time, or when pyproject.toml changed), then runs pytest. Extra arguments go to pytest.
# Without test paths among them, the ACP v2 tests run first on the SDK's next major (.venv-next).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
ensure_venv test -e '.[test]'
# The ACP v2 tests need the SDK's next major (the release above has no acp.experimental.v2): run them first in
# .venv-next on that release, unless test paths were given, so that the whole suite's summary comes last.
NEXT_SDK="1.0.0rc3"
run_next=1
for arg in "$@"; do [ -e "${arg%%::*}" ] && run_next=0; done
if [ "$run_next" = 1 ]; then
    [ -x .venv-next/bin/python ] || .venv/bin/python -m venv .venv-next
    .venv-next/bin/python -m pip install -q -e '.[test]' "agent-client-protocol==$NEXT_SDK"
    echo "== ACP v2 tests on agent-client-protocol $NEXT_SDK (.venv-next)"
    .venv-next/bin/python -m pytest "$@" tests/test_agent_v2.py
fi
exec .venv/bin/python -m pytest "$@"
