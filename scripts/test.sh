#!/usr/bin/env bash
# Runs the test suite on a fresh machine: creates .venv (Python 3.11), installs the package with its
# test extras from this repository's pyproject.toml, then runs pytest. Extra arguments go to pytest.
# Without test paths among them, the ACP v2 tests run first on the SDK's next major (.venv-next).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# The ACP v2 tests need the SDK's next major (the release above has no acp.experimental.v2): run them first in
# .venv-next on that release, unless test paths were given, so that the whole suite's summary comes last.
NEXT_SDK="1.0.0rc3"
run_next=1
for arg in "$@"; do [ -e "${arg%%::*}" ] && run_next=0; done
if [ "$run_next" = 1 ]; then
    [ -x .venv-next/bin/python ] || "$PYTHON" -m venv .venv-next
    .venv-next/bin/python -m pip install -q -e '.[test]' "agent-client-protocol==$NEXT_SDK"
    echo "== ACP v2 tests on agent-client-protocol $NEXT_SDK (.venv-next)"
    .venv-next/bin/python -m pytest "$@" tests/test_agent_v2.py
fi
exec .venv/bin/python -m pytest "$@"
