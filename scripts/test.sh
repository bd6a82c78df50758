#!/usr/bin/env bash
# Runs the test suite on a fresh machine: creates .venv (the first of Python 3.11, 3.12, 3.13, 3.10 found;
# PYTHON=... overrides), installs the package with its test extras from this repository's pyproject.toml
# (only the first time, or when pyproject.toml changed), then runs pytest. Extra arguments go to pytest.
# Without test paths among them, the tests that need the SDK's next major run first in .venv-next (NEXT_TESTS).
# -rs: every skipped test is listed with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
ensure_venv test -e '.[test]'
# ACP v2 (acp.experimental.v2) and the remote transports (acp.http, acp.ws) are in the SDK's next major only: run
# their files first in .venv-next on that release, with its 'http' extra, an ASGI server and the HTTP
# instrumentations (what noxfile.py installs in its cells of that release), unless test paths were given, so
# that the whole suite's summary comes last. tests/test_readme_command.py keeps these lists in step.
NEXT_SDK="1.0.0rc3"
NEXT_TESTS=(tests/test_agent_v2.py tests/test_remote_transports.py)
NEXT_DEPS=("agent-client-protocol[http]==$NEXT_SDK" uvicorn opentelemetry-instrumentation-starlette opentelemetry-instrumentation-httpx)
run_next=1
for arg in "$@"; do [ -e "${arg%%::*}" ] && run_next=0; done
if [ "$run_next" = 1 ]; then
    VENV=.venv-next ensure_venv test-next -e '.[test]' "${NEXT_DEPS[@]}"
    echo "== tests of the SDK's next major on agent-client-protocol $NEXT_SDK (.venv-next): ${NEXT_TESTS[*]}"
    .venv-next/bin/python -m pytest -rs "$@" "${NEXT_TESTS[@]}"
fi
exec .venv/bin/python -m pytest -rs "$@"
