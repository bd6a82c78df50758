#!/usr/bin/env bash
# The wheel is the product: build the sdist and, from it, the wheel; check what they contain; then, for
# each SDK release given (default: the latest stable and the next major's release candidate), install
# the wheel with that SDK into a fresh virtual environment outside the source tree and run from there
#   acp-otel --help
#   acp-otel demo              (checks: spans of both services in one trace, written as OTLP JSON)
#   a zero-code turn           (opentelemetry-instrument python .../client.py -> loopback receiver;
#                               scripts/zero_code_turn.py)
#   acp-otel proxy --help, and one traced initialize through acp-otel proxy to the packaged example agent
#                              (scripts/proxy_check.py: the answer alone on stdout, the span at a receiver)
# Usage: scripts/wheel_check.sh [SDK_VERSION ...]     (PYTHON selects the interpreter, default python3.11;
#        ACP_OTEL_DIST=DIR checks the sdist and wheel that `python -m build --outdir DIR .` made, without building)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
PYTHON="${PYTHON:-python3.11}"
sdks=("$@")
[ ${#sdks[@]} -gt 0 ] || sdks=(0.12.1 1.0.0rc3)
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
[ -n "${ACP_OTEL_DIST:-}" ] || .venv/bin/python -m pip install -q "build >= 1"
work="$(mktemp -d "${TMPDIR:-/tmp}/acp-otel-wheel-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

if [ -n "${ACP_OTEL_DIST:-}" ]; then
    # .ci/run built them once (the same command) for every nox session too.
    echo "== the sdist and the wheel built from it, in $ACP_OTEL_DIST"
    dist="$ACP_OTEL_DIST"
else
    echo "== build (sdist, then the wheel from the sdist)"
    dist="$work/dist"
    .venv/bin/python -m build -q --outdir "$dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
fi
wheel="$(ls "$dist"/*.whl)"
sdist="$(ls "$dist"/*.tar.gz)"
echo "built $(basename "$wheel") and $(basename "$sdist")"
must_have=(acp_otel/py.typed acp_otel/_demo/examples/client.py acp_otel/_demo/examples/agent.py
    acp_otel/_demo/examples/README.md acp_otel/_demo/receiver.py)
wheel_files="$(.venv/bin/python -m zipfile -l "$wheel")"
sdist_files="$(tar -tzf "$sdist")"
for path in "${must_have[@]}"; do
    grep -q "^$path " <<<"$wheel_files" || {
        echo "wheel_check: $path is missing from the wheel" >&2; exit 1; }
    grep -q "/$path\$" <<<"$sdist_files" || { echo "wheel_check: $path is missing from the sdist" >&2; exit 1; }
done
echo "wheel and sdist contain: ${must_have[*]}"

for sdk in "${sdks[@]}"; do
    echo "== SDK $sdk: fresh venv with the wheel only"
    venv="$work/venv-$sdk"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$venv/bin/python" -m pip install -q "$wheel" "agent-client-protocol==$sdk"
    run="$work/run-$sdk"
    mkdir -p "$run"
    cd "$run"  # away from the source tree: nothing of it is on sys.path
    location="$("$venv/bin/python" -c 'import acp_otel, os; print(os.path.dirname(acp_otel.__file__))')"
    case "$location" in "$root"*) echo "wheel_check: acp_otel imported from the source tree" >&2; exit 1;; esac
    installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("agent-client-protocol"))')"
    [ "$installed" = "$sdk" ] || { echo "wheel_check: installed SDK $installed, wanted $sdk" >&2; exit 1; }

    "$venv/bin/acp-otel" --help >"$run/help.txt"
    grep -q "demo" "$run/help.txt" || { echo "wheel_check: acp-otel --help lists no demo" >&2; exit 1; }
    echo "acp-otel --help: ok"

    env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT -u PYTHONPATH \
        "$venv/bin/acp-otel" demo --color never --width 100 --output "$run/trace.json" >"$run/demo.txt" 2>&1 || {
        cat "$run/demo.txt"; echo "wheel_check: acp-otel demo failed" >&2; exit 1; }
    grep -q "2 services (acp-example-client, agent)" "$run/demo.txt" || {
        cat "$run/demo.txt"; echo "wheel_check: the demo did not show the spans of both services" >&2; exit 1; }
    "$venv/bin/python" - "$run/trace.json" <<'PY'
import sys
from acp_otel._demo.otlp_json import read_otlp_json
spans = read_otlp_json(sys.argv[1])
services = {s.service_name for s in spans}
assert services == {"acp-example-client", "agent"}, services
assert len({s.trace_id for s in spans}) == 1, "more than one trace"
print(f"acp-otel demo: ok, {len(spans)} spans of {', '.join(sorted(services))} in one trace")
PY
    "$venv/bin/python" "$root/scripts/zero_code_turn.py"
    "$venv/bin/acp-otel" proxy --help >"$run/proxy-help.txt"
    grep -q -- "--service-name" "$run/proxy-help.txt" || { echo "wheel_check: acp-otel proxy --help" >&2; exit 1; }
    "$venv/bin/python" "$root/scripts/proxy_check.py" "$venv/bin/acp-otel"
    cd "$root"
done
echo "wheel_check.sh: ok for SDK ${sdks[*]} in $((SECONDS - start)) s"
