#!/usr/bin/env bash
# The local stack without Docker: an OpenTelemetry Collector, Jaeger v2 and Prometheus 3 from binaries you have
# (release downloads, `go install`, distro packages), every listener on 127.0.0.1. Grafana and Tempo are not
# started (the Collector's Tempo leg is left out of its traces pipeline).
#
#   bash collector-config/run-local.sh start     # start the three, wait until each answers
#   bash collector-config/run-local.sh status    # which are running
#   bash collector-config/run-local.sh stop      # stop them (traces and metrics are kept in memory / a temp dir)
#
# The binaries: $OTELCOL_BIN (default: otelcol-contrib, else otelcol, on PATH), $JAEGER_BIN (jaeger),
# $PROMETHEUS_BIN (prometheus). The Collector needs the components otel-collector.yaml uses: receiver otlp,
# processors memory_limiter and batch, exporters otlp, otlphttp and debug (the contrib and core releases have them).
# Ports: the Collector takes OTLP on 4317 (gRPC) and 4318 (HTTP), its own metrics on 8888; Jaeger's UI and API on
# 16686, its OTLP receiver on 14317 (the Collector forwards there); Prometheus on 9090. Each can be moved with the
# variable named below (OTLP_GRPC_PORT, ...; Jaeger's are those of jaeger.yaml: JAEGER_QUERY_HTTP_PORT, ...).
# Logs, pids and Prometheus' data: $ACP_OTEL_STACK_DIR (default ${TMPDIR:-/tmp}/acp-otel-stack).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
state="${ACP_OTEL_STACK_DIR:-${TMPDIR:-/tmp}/acp-otel-stack}"
otlp_grpc="${OTLP_GRPC_PORT:-4317}"
otlp_http="${OTLP_HTTP_PORT:-4318}"
collector_metrics="${COLLECTOR_METRICS_PORT:-8888}"
prometheus_port="${PROMETHEUS_PORT:-9090}"
jaeger_query="${JAEGER_QUERY_HTTP_PORT:-16686}"
jaeger_otlp="${JAEGER_OTLP_GRPC_PORT:-14317}"

find_bin() { # variable default...
    local chosen="${!1:-}" name
    if [ -n "$chosen" ]; then
        command -v "$chosen" || { echo "run-local.sh: $1=$chosen: not found" >&2; return 1; }
        return
    fi
    for name in "${@:2}"; do
        command -v "$name" && return
    done
    echo "run-local.sh: none of ${*:2} on PATH: set $1 to the binary" >&2
    return 1
}

wait_for() { # name url
    local i
    for i in $(seq 1 150); do
        if curl -fsS -o /dev/null "$2" 2>/dev/null; then
            echo "$1: up ($2)"
            return
        fi
        if ! kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; then
            echo "run-local.sh: $1 exited; its log, $state/$1.log:" >&2
            tail -20 "$state/$1.log" >&2
            return 1
        fi
        sleep 0.2
    done
    echo "run-local.sh: $1 did not answer $2 within 30 s; its log: $state/$1.log" >&2
    return 1
}

start_one() { # name binary args...
    local name="$1"
    shift
    if [ -f "$state/$name.pid" ] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then
        echo "$name: already running (pid $(cat "$state/$name.pid"))"
        return
    fi
    nohup "$@" >"$state/$name.log" 2>&1 </dev/null &
    echo $! >"$state/$name.pid"
}

start() {
    local otelcol jaeger prometheus
    otelcol="$(find_bin OTELCOL_BIN otelcol-contrib otelcol)"
    jaeger="$(find_bin JAEGER_BIN jaeger)"
    prometheus="$(find_bin PROMETHEUS_BIN prometheus)"
    mkdir -p "$state"
    start_one jaeger "$jaeger" --config="$here/jaeger.yaml"
    start_one prometheus "$prometheus" --config.file="$here/prometheus.yml" --storage.tsdb.path="$state/prometheus-data" \
        --web.listen-address="127.0.0.1:$prometheus_port" --web.enable-otlp-receiver
    wait_for jaeger "http://127.0.0.1:$jaeger_query/api/services"
    wait_for prometheus "http://127.0.0.1:$prometheus_port/-/ready"
    # The Collector last, once what it exports to answers; Tempo is left out of its traces pipeline.
    OTELCOL_OTLP_GRPC_ENDPOINT="127.0.0.1:$otlp_grpc" OTELCOL_OTLP_HTTP_ENDPOINT="127.0.0.1:$otlp_http" \
        OTELCOL_METRICS_HOST=127.0.0.1 OTELCOL_METRICS_PORT="$collector_metrics" \
        JAEGER_OTLP_GRPC_ENDPOINT="127.0.0.1:$jaeger_otlp" \
        PROMETHEUS_OTLP_ENDPOINT="http://127.0.0.1:$prometheus_port/api/v1/otlp" \
        start_one otelcol "$otelcol" --config="$here/otel-collector.yaml" \
        "--config=yaml:service::pipelines::traces::exporters: [otlp/jaeger, debug]"
    wait_for otelcol "http://127.0.0.1:$collector_metrics/metrics"
    echo "send OTLP to the Collector: OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$otlp_http (HTTP)" \
        "or http://127.0.0.1:$otlp_grpc (gRPC)"
    echo "Jaeger's API: http://127.0.0.1:$jaeger_query/api/services; Prometheus: http://127.0.0.1:$prometheus_port;" \
        "logs in $state"
}

stop() {
    local name pid
    for name in otelcol jaeger prometheus; do
        [ -f "$state/$name.pid" ] || continue
        pid="$(cat "$state/$name.pid")"
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            echo "$name: stopped"
        fi
        rm -f "$state/$name.pid"
    done
}

status() {
    local name
    for name in otelcol jaeger prometheus; do
        if [ -f "$state/$name.pid" ] && kill -0 "$(cat "$state/$name.pid")" 2>/dev/null; then
            echo "$name: running (pid $(cat "$state/$name.pid"), log $state/$name.log)"
        else
            echo "$name: not running"
        fi
    done
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: bash collector-config/run-local.sh start|status|stop" >&2
    exit 2
    ;;
esac
