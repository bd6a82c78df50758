#!/usr/bin/env bash
# Compatibility matrix on a fresh machine: installs nox and uv into .venv (created with Python 3.11 if missing)
# and runs the noxfile's default sessions: `matrix` (core span-contract tests over SDK releases x
# Pythons) and `sdk_suite` (the SDK's own tests, plain and traced). Extra arguments go to nox, e.g.
#   scripts/matrix.sh -s matrix
#   scripts/matrix.sh -s "matrix(python='3.12', sdk='1.0.0rc3')"
# Python 3.10-3.13 must be installed; with pyenv they need not be selected (the noxfile selects them).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# uv beside nox: the noxfile installs into the sessions' environments with it (pip when it is missing).
if ! .venv/bin/python -c "import nox" 2>/dev/null || [ ! -x .venv/bin/uv ]; then
    .venv/bin/python -m pip install -q "nox>=2024.4.15" uv
fi
# scripts/sdk_suite.py writes one summary-VERSION.json per SDK-suite run into the sdist cache folder;
# remove those of earlier runs so that only this run's are printed.
cache="$(.venv/bin/python tests/support/sdk_sdist.py)"
rm -f "$cache"/summary-*.json
start=$SECONDS
status=0
.venv/bin/python -m nox "$@" || status=$?
# One line per SDK-suite run, then the wall time.
for summary in "$cache"/summary-*.json; do
    [ -e "$summary" ] || continue
    .venv/bin/python - "$summary" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
fmt = lambda c: f"{c['passed']} passed, {c['failed'] + c['error']} failed, {c['skipped']} skipped"
print(f"sdk_suite {s['sdk']:>9} (Python {s['python']}): plain {fmt(s['plain'])} | traced {fmt(s['traced'])}"
      f" | {s['spans'].get('spans', 0)} spans | failing only traced: {s['failed_only_traced'] or 'none'}"
      f" | missing traced: {s['missing_traced'] or 'none'} | problems: {s['problems'] or 'none'}")
EOF
done
echo "matrix.sh: nox exit status $status, wall time $((SECONDS - start)) s"
exit "$status"
