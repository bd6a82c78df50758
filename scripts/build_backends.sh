#!/usr/bin/env bash
# Builds the backends the `backends` nox session runs (tests/backends/check_collector_stack.py) from the Go module
# proxy: Jaeger v2, a core OpenTelemetry Collector and Prometheus 3, each from a Go module of its own under
# tests/backends/<name>/ (go.mod and go.sum pin every dependency; their pins differ and are never merged).
#
#   bash scripts/build_backends.sh [jaeger] [otelcol] [prometheus]     # default: all three
#
# Prints one line NAME=PATH per backend on stdout (what the tests read); progress and timings on stderr.
# Binaries are kept outside the clone, keyed by the module's version and a hash of its go.mod, go.sum and Go
# files: ${XDG_CACHE_HOME:-$HOME/.cache}/acp-otel/backends/<name>-<version>-<hash>/<name>. A binary already
# there is not rebuilt; Go's own module and build caches ($GOMODCACHE, $GOCACHE) make a rebuild after a change
# cheap too. Builds run under `nice -n 10`.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/acp-otel/backends"

# name -> the Go package built, and the module whose version names the build.
declare -A PACKAGE=(
    [jaeger]=github.com/jaegertracing/jaeger/cmd/jaeger
    [otelcol]=.
    [prometheus]=github.com/prometheus/prometheus/cmd/prometheus
)
declare -A VERSION_OF=(
    [jaeger]=github.com/jaegertracing/jaeger
    [otelcol]=go.opentelemetry.io/collector/otelcol
    [prometheus]=github.com/prometheus/prometheus
)

command -v go >/dev/null 2>&1 || { echo "build_backends.sh: no Go toolchain on PATH (go)" >&2; exit 2; }
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(jaeger otelcol prometheus)
for name in "${names[@]}"; do
    [ -n "${PACKAGE[$name]:-}" ] || { echo "build_backends.sh: unknown backend $name" >&2; exit 2; }
    module="$root/tests/backends/$name"
    version="$(awk -v m="${VERSION_OF[$name]}" '$1 == m { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
        "$module/go.mod")"
    [ -n "$version" ] || { echo "build_backends.sh: ${VERSION_OF[$name]} not in $module/go.mod" >&2; exit 2; }
    hash="$(cd "$module" && cat go.mod go.sum $(ls ./*.go 2>/dev/null) | sha256sum | cut -c1-12)"
    out="$cache/$name-$version-$hash/$name"
    if [ -x "$out" ]; then
        echo "$name $version: cached ($out)" >&2
    else
        echo "$name $version: building ${PACKAGE[$name]} (go $(go env GOVERSION), nice -n 10)" >&2
        t=$SECONDS
        # Older builds of this version (other module files) go: only the current one is kept.
        for old in "$cache/$name-$version-"*; do
            [ "$old" = "$(dirname "$out")" ] || rm -rf "$old"
        done
        mkdir -p "$(dirname "$out")"
        (cd "$module" && nice -n 10 go build -trimpath -o "$out.partial" "${PACKAGE[$name]}")
        mv "$out.partial" "$out"
        echo "$name $version: built in $((SECONDS - t)) s ($out)" >&2
    fi
    echo "$name=$out"
done
