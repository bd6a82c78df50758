"""Jaeger v2, the OpenTelemetry Collector and Prometheus 3, built from the Go module proxy and run on loopback.

``binaries()`` builds them with ``scripts/build_backends.sh`` (cached outside the clone, keyed by version) or says
why it cannot: no Go toolchain, or a failed build. ``Stack`` starts the three on free loopback ports (the files in
``collector-config/`` with ``${env:…}`` ports, the variables set to the ports chosen at run time): Jaeger with
``jaeger.yaml`` (memory storage, its own tracing off), the Collector with ``otel-collector.yaml`` (pointed at this
Jaeger and this Prometheus, the Tempo leg left out of the traces pipeline: Tempo is never run here), Prometheus with
``prometheus.yml`` and its OTLP receiver on. ``collector-config/run-local.sh`` does the same for a user, on the
default ports.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "collector-config"
COLLECTOR_CONFIG = CONFIG_DIR / "otel-collector.yaml"
BUILD_SCRIPT = ROOT / "scripts" / "build_backends.sh"
LOOPBACK = "127.0.0.1"
# The traces pipeline without the Tempo exporter: the same override collector-config/run-local.sh passes.
NO_TEMPO = "yaml:service::pipelines::traces::exporters: [otlp/jaeger, debug]"
# A logs pipeline to the debug exporter, for the logs an agent exports through ``acp-otel proxy --agent-telemetry``
# (collector-config has traces and metrics pipelines only).
LOGS_TO_DEBUG = (
    "--config=yaml:service::pipelines::logs::receivers: [otlp]",
    "--config=yaml:service::pipelines::logs::exporters: [debug]",
)


class Unavailable(Exception):
    """The backends cannot be had here (no Go, a failed build): the reason, to skip with or fail on."""


def binaries() -> dict[str, Path]:
    """``{"jaeger": path, "otelcol": path, "prometheus": path}``, built (or found in the cache) by the script."""
    if shutil.which("go") is None:
        raise Unavailable("no Go toolchain on PATH: the backends are built from the Go module proxy")
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, cwd=str(ROOT), check=False)
    if done.returncode != 0:
        raise Unavailable(f"scripts/build_backends.sh failed ({done.returncode}):\n{done.stderr[-4000:]}")
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {name: Path(path) for name, path in found.items()}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return bytes(response.read())


def http_json(url: str, timeout: float = 10.0) -> Any:
    return json.loads(http_get(url, timeout))


@dataclass
class Ports:
    jaeger_grpc: int
    jaeger_http: int
    jaeger_query_http: int
    jaeger_query_grpc: int
    jaeger_health: int
    jaeger_metrics: int
    collector_grpc: int
    collector_http: int
    collector_metrics: int
    prometheus: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(*(free_port() for _ in range(10)))


def jaeger_env(ports: Ports) -> dict[str, str]:
    """The variables ``collector-config/jaeger.yaml`` takes its ports from."""
    return {
        "JAEGER_METRICS_PORT": str(ports.jaeger_metrics),
        "JAEGER_HEALTH_PORT": str(ports.jaeger_health),
        "JAEGER_QUERY_HTTP_PORT": str(ports.jaeger_query_http),
        "JAEGER_QUERY_GRPC_PORT": str(ports.jaeger_query_grpc),
        "JAEGER_OTLP_GRPC_PORT": str(ports.jaeger_grpc),
        "JAEGER_OTLP_HTTP_PORT": str(ports.jaeger_http),
    }


def collector_env(ports: Ports) -> dict[str, str]:
    """The variables ``collector-config/otel-collector.yaml`` takes its endpoints from (compose names by default)."""
    return {
        "OTELCOL_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{ports.collector_grpc}",
        "OTELCOL_OTLP_HTTP_ENDPOINT": f"{LOOPBACK}:{ports.collector_http}",
        "OTELCOL_METRICS_HOST": LOOPBACK,
        "OTELCOL_METRICS_PORT": str(ports.collector_metrics),
        "JAEGER_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{ports.jaeger_grpc}",
        "PROMETHEUS_OTLP_ENDPOINT": f"http://{LOOPBACK}:{ports.prometheus}/api/v1/otlp",
    }


class Stack:
    """The three processes; ``with Stack(binaries) as stack:`` starts them and waits until each answers."""

    def __init__(self, bins: dict[str, Path], with_prometheus: bool = True) -> None:
        self.bins = bins
        self.with_prometheus = with_prometheus
        self.ports = Ports.pick()
        self._dir = Path(tempfile.mkdtemp(prefix="acp-otel-backends-"))
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------------ addresses
    @property
    def query_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.jaeger_query_http}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.prometheus}"

    @property
    def collector_grpc(self) -> str:
        return f"{LOOPBACK}:{self.ports.collector_grpc}"

    @property
    def collector_http(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.collector_http}"

    @property
    def collector_metrics_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.collector_metrics}/metrics"

    def log(self, name: str) -> str:
        path = self._dir / f"{name}.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    # ------------------------------------------------------------------ life cycle
    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self._dir / f"{name}.log", "wb")
        self._procs[name] = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=str(self._dir)
        )
        log.close()

    def _wait_ready(self, name: str, url: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            proc = self._procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log(name)[-4000:]}")
            try:
                http_get(url, timeout=2)
                return
            except (urllib.error.URLError, OSError) as exc:
                if time.monotonic() > deadline:
                    late = f"{name} did not answer {url} within {timeout:g} s:\n{self.log(name)[-4000:]}"
                    raise RuntimeError(late) from exc
                time.sleep(0.2)

    def __enter__(self) -> Stack:
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "JAEGER_", "OTELCOL_"))}
            env.update(jaeger_env(self.ports))
            self._start("jaeger", [str(self.bins["jaeger"]), f"--config={CONFIG_DIR / 'jaeger.yaml'}"], env)
            if self.with_prometheus:
                self._start(
                    "prometheus",
                    [
                        str(self.bins["prometheus"]),
                        f"--config.file={CONFIG_DIR / 'prometheus.yml'}",
                        f"--storage.tsdb.path={self._dir / 'prometheus-data'}",
                        f"--web.listen-address={LOOPBACK}:{self.ports.prometheus}",
                        "--web.enable-otlp-receiver",
                    ],
                )
            self._wait_ready("jaeger", f"{self.query_url}/api/services")
            self._wait_ready("jaeger", f"http://{LOOPBACK}:{self.ports.jaeger_health}/status")
            if self.with_prometheus:
                self._wait_ready("prometheus", f"{self.prometheus_url}/-/ready")
            # The Collector last, once what it exports to answers.
            env.update(collector_env(self.ports))
            self._start(
                "otelcol",
                [str(self.bins["otelcol"]), f"--config={COLLECTOR_CONFIG}", f"--config={NO_TEMPO}", *LOGS_TO_DEBUG],
                env,
            )
            self._wait_ready("otelcol", self.collector_metrics_url)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        # The Collector first (it flushes to the others), then Prometheus and Jaeger.
        for proc in reversed(list(self._procs.values())):
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def cleanup(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------------ what each one holds
    def listening(self) -> list[tuple[str, int]]:
        """(address, port) of every TCP socket the three processes listen on (from /proc/net/tcp{,6})."""
        inodes: set[str] = set()
        for proc in self._procs.values():
            fd_dir = Path(f"/proc/{proc.pid}/fd")
            for fd in fd_dir.iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        found = []
        for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                address, port = fields[1].split(":")
                found.append((_address(address, width), int(port, 16)))
        return found

    def collector_counters(self) -> dict[str, float]:
        """The Collector's own counters (its internal metrics endpoint)."""
        return counters(self.collector_metrics_url)

    def jaeger_counters(self) -> dict[str, float]:
        """Jaeger's own counters (it is a Collector distribution: the same names)."""
        return counters(f"http://{LOOPBACK}:{self.ports.jaeger_metrics}/metrics")

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """Jaeger's ``/api/traces/{id}`` (the JSON its UI renders), or None while it has no such trace."""
        try:
            data = http_json(f"{self.query_url}/api/traces/{trace_id}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        traces = data.get("data") or []
        return traces[0] if traces else None

    def prometheus_series(self, name: str) -> list[dict[str, str]]:
        query = urllib.parse.urlencode({"match[]": f'{{__name__="{name}"}}'})
        return list(http_json(f"{self.prometheus_url}/api/v1/series?{query}")["data"])


def counters(url: str) -> dict[str, float]:
    """A Collector's internal metrics (Prometheus text): ``name{labels}`` -> value, each name without a ``_total``
    suffix (v0.165 writes its counters without one, Jaeger's v0.139 with it)."""
    out = {}
    for line in http_get(url).decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            name, brace, labels = key.partition("{")
            out[name.removesuffix("_total") + brace + labels] = float(value)
    return out


def _address(hex_address: str, width: int) -> str:
    raw = bytes.fromhex(hex_address)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)
