"""Consistency checks for the tracing stack in collector-config/: the Docker Compose files and run-local.sh.

Docker is not available where this project is tested, so these tests check the wiring between the files
(names, ports, hosts, mounts). The Collector, Jaeger and Prometheus themselves run from binaries built here in
``tests/backends/check_collector_stack.py`` (``nox -s backends``), with these same files. Each check is a
function returning a list of problems; the mutation tests at the end prove the checks do catch broken
configurations.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "collector-config"
COMPONENT_KINDS = ("receivers", "processors", "exporters", "connectors")


ENV_REFERENCE = re.compile(r"\$\{env:([A-Z_][A-Z0-9_]*):-([^}]*)\}")


def load_raw(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CONFIG_DIR / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{name} must be a YAML mapping"
    return data


def with_defaults(value: Any) -> Any:
    """A Collector config as it reads with no variable set: each ``${env:NAME:-default}`` is its default."""
    if isinstance(value, dict):
        return {k: with_defaults(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_defaults(v) for v in value]
    if isinstance(value, str):
        expanded = ENV_REFERENCE.sub(lambda m: m.group(2), value)
        return int(expanded) if expanded.isdigit() and expanded != value else expanded
    return value


def load(name: str) -> dict[str, Any]:
    return dict(with_defaults(load_raw(name)))


@pytest.fixture(scope="module")
def collector() -> dict[str, Any]:
    return load("otel-collector.yaml")


@pytest.fixture(scope="module")
def jaeger() -> dict[str, Any]:
    return load("jaeger.yaml")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load("docker-compose.yaml")


@pytest.fixture(scope="module")
def tempo() -> dict[str, Any]:
    return load("tempo.yaml")


@pytest.fixture(scope="module")
def datasources() -> dict[str, Any]:
    return load("grafana-datasources.yaml")


# --------------------------------------------------------------------------- parsing helpers


def host_port(endpoint: str) -> tuple[str, int]:
    """Split ``host:port`` or ``scheme://host:port/...`` into (host, port)."""
    if "://" not in endpoint:
        endpoint = "tcp://" + endpoint
    parts = urlsplit(endpoint)
    assert parts.hostname is not None and parts.port is not None, f"no host:port in {endpoint!r}"
    return parts.hostname, parts.port


def published_ports(service: dict[str, Any]) -> dict[int, int]:
    """Container port -> host port for a compose service (short and long port syntax)."""
    out: dict[int, int] = {}
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            target, published = int(entry["target"]), entry.get("published", entry["target"])
            out[target] = int(published)
            continue
        spec = str(entry).split("/", 1)[0]  # drop "/tcp"
        pieces = spec.split(":")
        container = int(pieces[-1])
        out[container] = int(pieces[-2]) if len(pieces) >= 2 else container
    return out


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host source, container target) for bind mounts; named volumes are skipped."""
    mounts = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry.get("type", "bind") == "bind":
                mounts.append((entry["source"], entry["target"]))
            continue
        source, target = str(entry).split(":")[:2]
        if source.startswith((".", "/", "~")):
            mounts.append((source, target))
    return mounts


def command_args(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def flag_value(args: list[str], *names: str) -> str | None:
    """Value of ``--flag=value`` / ``-flag=value`` / ``--flag value`` in an argument list."""
    for i, arg in enumerate(args):
        for name in names:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(args):
                return args[i + 1]
    return None


def collector_service_name(compose: dict[str, Any]) -> str:
    names = [n for n, s in compose["services"].items() if "opentelemetry-collector" in s.get("image", "")]
    assert len(names) == 1, f"expected exactly one collector service, found {names}"
    return names[0]


def service_by_image(compose: dict[str, Any], image_fragment: str) -> str:
    names = [n for n, s in compose["services"].items() if image_fragment in s.get("image", "")]
    assert len(names) == 1, f"expected one service with image {image_fragment!r}, found {names}"
    return names[0]


# --------------------------------------------------------------------------- checks (return problems)


def pipeline_problems(collector: dict[str, Any]) -> list[str]:
    problems = []
    pipelines = collector.get("service", {}).get("pipelines", {})
    if "traces" not in pipelines:
        problems.append("service.pipelines has no traces pipeline")
    used: dict[str, set[str]] = {kind: set() for kind in COMPONENT_KINDS}
    for pipe_name, pipe in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            names = pipe.get(kind) or []
            if kind != "processors" and not names:
                problems.append(f"pipeline {pipe_name} has no {kind}")
            for name in names:
                used[kind].add(name)
                if name not in (collector.get(kind) or {}):
                    problems.append(f"pipeline {pipe_name} uses {kind[:-1]} {name!r} that is not defined")
    for kind in COMPONENT_KINDS:
        for name in collector.get(kind) or {}:
            if name not in used[kind]:
                problems.append(f"{kind[:-1]} {name!r} is defined but not used in any pipeline")
    for ext in collector.get("service", {}).get("extensions", []) or []:
        if ext not in (collector.get("extensions") or {}):
            problems.append(f"service uses extension {ext!r} that is not defined")
    for ext in collector.get("extensions") or {}:
        if ext not in (collector.get("service", {}).get("extensions") or []):
            problems.append(f"extension {ext!r} is defined but not enabled in service.extensions")
    return problems


def port_problems(collector: dict[str, Any], compose: dict[str, Any]) -> list[str]:
    problems = []
    protocols = collector["receivers"]["otlp"]["protocols"]
    published = published_ports(compose["services"][collector_service_name(compose)])
    for protocol, expected in (("grpc", 4317), ("http", 4318)):
        host, port = host_port(protocols[protocol]["endpoint"])
        if port != expected:
            problems.append(f"OTLP {protocol} receiver listens on {port}, the OTLP default is {expected}")
        if host not in ("0.0.0.0", "::", ""):
            problems.append(f"OTLP {protocol} receiver binds {host}: unreachable through a published port")
        if published.get(port) != port:
            problems.append(f"compose publishes {published} but the {protocol} receiver is on container port {port}")
    return problems


def exporter_problems(collector: dict[str, Any], compose: dict[str, Any], tempo: dict[str, Any]) -> list[str]:
    problems = []
    services = compose["services"]
    tempo_service = service_by_image(compose, "grafana/tempo")
    tempo_otlp = tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    for name, cfg in (collector.get("exporters") or {}).items():
        endpoint = (cfg or {}).get("endpoint")
        if endpoint is None:
            continue
        host, port = host_port(endpoint)
        if host not in services:
            problems.append(f"exporter {name} points at {host!r}, which is not a compose service")
        if host == tempo_service and port != host_port(tempo_otlp)[1]:
            problems.append(f"exporter {name} sends to port {port} but Tempo's OTLP gRPC receiver is {tempo_otlp}")
        if name.split("/")[0] == "otlp" and not (cfg.get("tls") or {}).get("insecure"):
            problems.append(f"exporter {name} needs tls.insecure: true (the backends serve plaintext)")
    return problems


def grafana_problems(datasources: dict[str, Any], compose: dict[str, Any], tempo: dict[str, Any]) -> list[str]:
    problems = []
    tempo_sources = [d for d in datasources.get("datasources", []) if d.get("type") == "tempo"]
    if len(tempo_sources) != 1:
        return [f"expected one Tempo data source, found {len(tempo_sources)}"]
    host, port = host_port(tempo_sources[0]["url"])
    tempo_service = service_by_image(compose, "grafana/tempo")
    if host != tempo_service:
        problems.append(f"Grafana queries {host!r} but the Tempo service is {tempo_service!r}")
    if port != tempo["server"]["http_listen_port"]:
        problems.append(
            f"Grafana queries port {port} but Tempo's http_listen_port is {tempo['server']['http_listen_port']}"
        )
    return problems


def mount_problems(compose: dict[str, Any]) -> list[str]:
    problems = []
    for name, service in compose["services"].items():
        for source, _target in bind_mounts(service):
            if not (CONFIG_DIR / source).resolve().is_file():
                problems.append(f"service {name} mounts {source}, which does not exist in collector-config/")
    # The config files must be mounted exactly where each program is told to read them.
    collector = compose["services"][collector_service_name(compose)]
    config_path = flag_value(command_args(collector), "--config") or "/etc/otelcol-contrib/config.yaml"
    if config_path.removeprefix("file:") not in {t for _, t in bind_mounts(collector)}:
        problems.append(f"collector reads {config_path} but nothing is mounted there")
    tempo_service = compose["services"][service_by_image(compose, "grafana/tempo")]
    tempo_path = flag_value(command_args(tempo_service), "-config.file", "--config.file")
    if tempo_path is None or tempo_path not in {t for _, t in bind_mounts(tempo_service)}:
        problems.append(f"tempo reads {tempo_path} but nothing is mounted there")
    grafana = compose["services"][service_by_image(compose, "grafana/grafana")]
    if not any(t.startswith("/etc/grafana/provisioning/datasources/") for _, t in bind_mounts(grafana)):
        problems.append("grafana-datasources.yaml is not mounted into Grafana's datasource provisioning folder")
    return problems


def shell_commands(markdown: str) -> list[str]:
    """The commands in the ``sh`` code blocks of a Markdown text, continuation lines joined, comments dropped."""
    commands: list[str] = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", markdown, re.DOTALL):
        joined = re.sub(r"\s*\\\n\s*", " ", block)
        commands += [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return commands


# What sets the OTLP protocol of a traced process when OTEL_EXPORTER_OTLP_PROTOCOL does not: opentelemetry-distro
# (under opentelemetry-instrument) defaults to grpc; acp-otel demo and instrument_explicit.py use http/protobuf.
DEFAULT_PROTOCOLS = {
    "opentelemetry-instrument": "grpc",
    "acp-otel demo": "http/protobuf",
    "instrument_explicit.py": "http/protobuf",
}
PROTOCOL_PORTS = {"grpc": 4317, "http/protobuf": 4318, "http/json": 4318}


def otlp_command_problems(commands: list[str]) -> list[str]:
    """Commands whose OTLP endpoint port does not match the protocol they export with, or that send signals
    the collector has no pipeline for."""
    problems = []
    for command in commands:
        launcher = next((name for name in DEFAULT_PROTOCOLS if name in command), None)
        if launcher is None:
            continue
        protocol_match = re.search(r"OTEL_EXPORTER_OTLP_PROTOCOL=(\S+)", command)
        protocol = protocol_match.group(1) if protocol_match else DEFAULT_PROTOCOLS[launcher]
        endpoint_match = re.search(r"OTEL_EXPORTER_OTLP_ENDPOINT=(\S+)", command)
        port = host_port(endpoint_match.group(1))[1] if endpoint_match else PROTOCOL_PORTS[protocol]
        if port != PROTOCOL_PORTS[protocol]:
            problems.append(
                f"{command!r} exports {protocol} to port {port}, the collector takes it on {PROTOCOL_PORTS[protocol]}"
            )
        if launcher == "opentelemetry-instrument" and "--logs_exporter none" not in command:
            problems.append(f"{command!r} exports logs, but the collector has only traces and metrics pipelines")
    return problems


# --------------------------------------------------------------------------- tests


def test_every_yaml_file_parses() -> None:
    files = sorted(CONFIG_DIR.glob("*.y*ml"))
    names = {f.name for f in files}
    assert {"otel-collector.yaml", "docker-compose.yaml", "tempo.yaml", "grafana-datasources.yaml"} <= names
    assert {"jaeger.yaml", "prometheus.yml"} <= names
    for path in files:
        assert isinstance(yaml.safe_load(path.read_text(encoding="utf-8")), dict), path.name


def test_pipeline_components_defined_and_used(collector: dict[str, Any]) -> None:
    assert pipeline_problems(collector) == []


def test_metrics_pipeline_reaches_prometheus_over_otlp(collector: dict[str, Any], compose: dict[str, Any]) -> None:
    exporters = collector["service"]["pipelines"]["metrics"]["exporters"]
    prometheus = service_by_image(compose, "prom/prometheus")
    targets = [collector["exporters"][name].get("endpoint", "") for name in exporters]
    assert any(host_port(t) == (prometheus, 9090) and t.endswith("/api/v1/otlp") for t in targets if t), targets
    assert "--web.enable-otlp-receiver" in command_args(compose["services"][prometheus])
    assert published_ports(compose["services"][prometheus]).get(9090) == 9090
    sources = load("grafana-datasources.yaml")["datasources"]
    assert [host_port(d["url"]) for d in sources if d["type"] == "prometheus"] == [(prometheus, 9090)]


def test_memory_limiter_runs_first(collector: dict[str, Any]) -> None:
    processors = collector["service"]["pipelines"]["traces"]["processors"]
    assert processors[0] == "memory_limiter"
    limiter = collector["processors"]["memory_limiter"]
    assert {"check_interval", "limit_mib", "spike_limit_mib"} <= set(limiter)
    assert limiter["spike_limit_mib"] < limiter["limit_mib"]
    assert "batch" in processors


def test_expected_exporters(collector: dict[str, Any]) -> None:
    assert set(collector["service"]["pipelines"]["traces"]["exporters"]) == {"otlp/jaeger", "otlp/tempo", "debug"}


def test_published_ports_match_receiver_endpoints(collector: dict[str, Any], compose: dict[str, Any]) -> None:
    assert port_problems(collector, compose) == []


def test_exporters_target_existing_services(
    collector: dict[str, Any], compose: dict[str, Any], tempo: dict[str, Any]
) -> None:
    assert exporter_problems(collector, compose, tempo) == []


def test_grafana_datasource_points_at_tempo(
    datasources: dict[str, Any], compose: dict[str, Any], tempo: dict[str, Any]
) -> None:
    assert grafana_problems(datasources, compose, tempo) == []
    grafana = compose["services"][service_by_image(compose, "grafana/grafana")]
    env = grafana.get("environment", {})
    assert str(env.get("GF_AUTH_ANONYMOUS_ENABLED")).lower() == "true"
    assert env.get("GF_AUTH_ANONYMOUS_ORG_ROLE") == "Admin"
    assert published_ports(grafana).get(3000) == 3000


def test_compose_mounts_exist_and_match_config_paths(compose: dict[str, Any]) -> None:
    assert mount_problems(compose) == []


def test_ui_ports_and_tempo_api_published(compose: dict[str, Any], tempo: dict[str, Any]) -> None:
    jaeger = compose["services"][service_by_image(compose, "jaegertracing/")]
    assert published_ports(jaeger).get(16686) == 16686
    tempo_service = compose["services"][service_by_image(compose, "grafana/tempo")]
    assert tempo["server"]["http_listen_port"] in published_ports(tempo_service)
    assert tempo["storage"]["trace"]["backend"] == "local"


def test_images_are_pinned_and_dependencies_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and "/" not in tag, f"{name}: image {image!r} has no tag"
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: image tag {tag!r} is not a concrete version"
        for dep in service.get("depends_on", []):
            assert dep in services, f"{name} depends on unknown service {dep!r}"


def test_readme_documents_usage() -> None:
    text = (CONFIG_DIR / "README.md").read_text(encoding="utf-8")
    assert "docker compose -f collector-config/docker-compose.yaml up -d" in text
    for port in ("4317", "4318", "16686", "3000", "3200"):
        assert port in text
    commands = shell_commands(text)
    # OTLP/HTTP on 4318 where it is the default, and both ways under opentelemetry-instrument (gRPC by default).
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 acp-otel demo" in commands
    instrumented = [c for c in commands if "opentelemetry-instrument" in c]
    assert any("OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317" in c and "PROTOCOL" not in c for c in instrumented)
    assert any("OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in c and "localhost:4318" in c for c in instrumented)


@pytest.mark.parametrize("doc", ["collector-config/README.md", "examples/README.md"])
def test_documented_commands_use_the_port_of_their_protocol(doc: str) -> None:
    commands = shell_commands((ROOT / doc).read_text(encoding="utf-8"))
    assert any("opentelemetry-instrument" in c for c in commands)
    assert otlp_command_problems(commands) == []


def test_readme_commands_fit_the_backend_it_suggests() -> None:
    """The README shows Phoenix first, which takes traces only: its zero-code commands export no metrics (each
    metrics export would be rejected, and with no receiver retried, holding up the exit) and no logs."""
    commands = [
        c for c in shell_commands((ROOT / "README.md").read_text(encoding="utf-8")) if "opentelemetry-instrument" in c
    ]
    assert commands
    for command in commands:
        assert "--metrics_exporter none" in command or "OTEL_METRICS_EXPORTER=none" in command, command
    assert otlp_command_problems(commands) == []


def endpoints(config: Any, path: str = "") -> dict[str, str]:
    """Every ``endpoint`` (and the telemetry reader's ``host``:``port``) in a Collector config, by where it is."""
    found: dict[str, str] = {}
    if isinstance(config, dict):
        for key, value in config.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "endpoint" and isinstance(value, str):
                found[where] = value
            elif key == "prometheus" and isinstance(value, dict) and "host" in value:
                found[where] = f"{value['host']}:{value['port']}"
            else:
                found.update(endpoints(value, where))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            found.update(endpoints(value, f"{path}[{i}]"))
    return found


def env_problems(raw_collector: dict[str, Any]) -> list[str]:
    """Each address in the Collector config comes from a variable, so the binaries can be pointed at loopback."""
    return [
        f"{where} is {value!r}, not ${{env:NAME:-default}}"
        for where, value in endpoints(raw_collector).items()
        if not ENV_REFERENCE.search(value)
    ]


def jaeger_problems(jaeger: dict[str, Any], collector: dict[str, Any]) -> list[str]:
    """Jaeger for run-local.sh: every listener on loopback, none on a port of the Collector's, no self-tracing."""
    problems = []
    taken = {host_port(e)[1] for e in endpoints(collector).values() if host_port(e)[0] not in COMPOSE_HOSTS}
    for where, value in endpoints(jaeger).items():
        host, port = host_port(value)
        if host != "127.0.0.1":
            problems.append(f"Jaeger's {where} listens on {host}")
        if port in taken:
            problems.append(f"Jaeger's {where} takes port {port}, which the Collector uses")
    query = jaeger["extensions"]["jaeger_query"]
    if query.get("enable_tracing") is not False:
        problems.append("jaeger_query traces itself (enable_tracing is not false)")
    if not {"http", "grpc"} <= set(query):
        problems.append("jaeger_query's http and grpc endpoints are not both set (it listens on every interface)")
    return problems


COMPOSE_HOSTS = {"jaeger", "tempo", "prometheus"}


def run_local_problems(script: str, jaeger: dict[str, Any]) -> list[str]:
    """run-local.sh sends the Collector's traces to Jaeger's OTLP port and leaves Tempo out of the pipeline."""
    problems = []
    grpc = host_port(jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1]
    if f'jaeger_otlp="${{JAEGER_OTLP_GRPC_PORT:-{grpc}}}"' not in script:
        problems.append(f"run-local.sh's default for Jaeger's OTLP port is not jaeger.yaml's {grpc}")
    if 'JAEGER_OTLP_GRPC_ENDPOINT="127.0.0.1:$jaeger_otlp"' not in script:
        problems.append("run-local.sh does not point the Collector at Jaeger's OTLP receiver")
    if "traces::exporters: [otlp/jaeger, debug]" not in script:
        problems.append("run-local.sh keeps the Tempo exporter in the traces pipeline")
    query = host_port(jaeger["extensions"]["jaeger_query"]["http"]["endpoint"])[1]
    if f'jaeger_query="${{JAEGER_QUERY_HTTP_PORT:-{query}}}"' not in script:
        problems.append(f"run-local.sh does not wait for Jaeger's query API on {query}")
    return problems


def test_collector_addresses_come_from_variables() -> None:
    assert env_problems(load_raw("otel-collector.yaml")) == []


def test_jaeger_for_run_local_on_loopback(jaeger: dict[str, Any], collector: dict[str, Any]) -> None:
    assert jaeger_problems(jaeger, collector) == []
    assert jaeger["extensions"]["jaeger_storage"]["backends"]["memstore"] == {"memory": {"max_traces": 100000}}


def test_run_local_points_at_jaeger(jaeger: dict[str, Any]) -> None:
    assert run_local_problems((CONFIG_DIR / "run-local.sh").read_text(encoding="utf-8"), jaeger) == []


def test_compose_images_are_the_tested_versions(compose: dict[str, Any]) -> None:
    """The compose stack runs the releases the backends session builds (tests/backends/*/go.mod)."""
    services = compose["services"]
    modules = {
        "jaegertracing/jaeger": ("jaeger", "github.com/jaegertracing/jaeger", {"v1.75.0": "2.12.0"}),
        "otel/opentelemetry-collector-contrib": ("otelcol", "go.opentelemetry.io/collector/otelcol", {}),
        "prom/prometheus": ("prometheus", "github.com/prometheus/prometheus", {}),
    }
    for image, (folder, module, tags) in modules.items():
        (tag,) = [s["image"].rpartition(":")[2] for s in services.values() if s["image"].startswith(image + ":")]
        go_mod = (ROOT / "tests" / "backends" / folder / "go.mod").read_text(encoding="utf-8")
        (version,) = re.findall(rf"^\s*(?:require )?{re.escape(module)} (v[0-9.]+)", go_mod, re.MULTILINE)
        if folder == "prometheus":  # module v0.3xx.y is Prometheus 3.xx.y
            _major, minor, patch = version[1:].split(".")
            expected = f"v3.{int(minor) - 300}.{patch}"
        else:
            expected = tags.get(version, version.removeprefix("v"))
        assert tag == expected, (image, tag, version)


# --------------------------------------------------------------------------- the checks can fail


def test_checks_catch_broken_pipeline(collector: dict[str, Any]) -> None:
    broken = copy.deepcopy(collector)
    del broken["processors"]["batch"]
    assert any("'batch' that is not defined" in p for p in pipeline_problems(broken))
    broken = copy.deepcopy(collector)
    broken["exporters"]["otlp/unused"] = {"endpoint": "jaeger:4317"}
    assert any("'otlp/unused' is defined but not used" in p for p in pipeline_problems(broken))


def test_checks_catch_port_and_host_mismatches(
    collector: dict[str, Any], compose: dict[str, Any], tempo: dict[str, Any], datasources: dict[str, Any]
) -> None:
    broken = copy.deepcopy(collector)
    broken["receivers"]["otlp"]["protocols"]["http"]["endpoint"] = "0.0.0.0:4319"
    assert port_problems(broken, compose)
    broken["receivers"]["otlp"]["protocols"]["http"]["endpoint"] = "localhost:4318"
    assert any("unreachable" in p for p in port_problems(broken, compose))

    broken_compose = copy.deepcopy(compose)
    broken_compose["services"][collector_service_name(compose)]["ports"] = ["14318:4318", "4317:4317"]
    assert port_problems(collector, broken_compose)

    broken = copy.deepcopy(collector)
    broken["exporters"]["otlp/jaeger"]["endpoint"] = "jaeger-collector:4317"
    assert exporter_problems(broken, compose, tempo)

    broken_tempo = copy.deepcopy(tempo)
    broken_tempo["server"]["http_listen_port"] = 3201
    assert grafana_problems(datasources, compose, broken_tempo)
    broken_tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] = "0.0.0.0:14317"
    assert exporter_problems(collector, compose, broken_tempo)


def test_checks_catch_grafana_host_mismatch(
    datasources: dict[str, Any], compose: dict[str, Any], tempo: dict[str, Any]
) -> None:
    broken = copy.deepcopy(datasources)
    source = next(d for d in broken["datasources"] if d["type"] == "tempo")
    source["url"] = "http://tempo-query:3200"
    assert any("Grafana queries 'tempo-query'" in p for p in grafana_problems(broken, compose, tempo))
    broken_compose = copy.deepcopy(compose)
    tempo_name = service_by_image(compose, "grafana/tempo")
    broken_compose["services"]["traces"] = broken_compose["services"].pop(tempo_name)
    assert any("the Tempo service is 'traces'" in p for p in grafana_problems(datasources, broken_compose, tempo))


def test_checks_catch_missing_mounts(compose: dict[str, Any]) -> None:
    broken = copy.deepcopy(compose)
    tempo_name = service_by_image(compose, "grafana/tempo")
    broken["services"][tempo_name]["volumes"] = ["./does-not-exist.yaml:/etc/tempo.yaml:ro"]
    assert any("does-not-exist.yaml" in p for p in mount_problems(broken))
    broken["services"][tempo_name]["volumes"] = ["./tempo.yaml:/etc/tempo/other.yaml:ro"]
    assert any("tempo reads" in p for p in mount_problems(broken))

    # The collector's config mounted somewhere else than --config says, or --config pointing elsewhere.
    collector_name = collector_service_name(compose)
    broken = copy.deepcopy(compose)
    broken["services"][collector_name]["volumes"] = ["./otel-collector.yaml:/etc/otelcol/config.yaml:ro"]
    assert any("collector reads /etc/otelcol-contrib/config.yaml" in p for p in mount_problems(broken))
    broken = copy.deepcopy(compose)
    broken["services"][collector_name]["command"] = ["--config=/etc/otelcol/other.yaml"]
    assert any("collector reads /etc/otelcol/other.yaml" in p for p in mount_problems(broken))

    # Grafana without its provisioning mount, or with the file mounted outside the datasources folder.
    grafana_name = service_by_image(compose, "grafana/grafana")
    broken = copy.deepcopy(compose)
    del broken["services"][grafana_name]["volumes"]
    assert any("not mounted into Grafana's datasource provisioning" in p for p in mount_problems(broken))
    broken["services"][grafana_name]["volumes"] = ["./grafana-datasources.yaml:/etc/grafana/datasources.yaml:ro"]
    assert any("not mounted into Grafana's datasource provisioning" in p for p in mount_problems(broken))


def test_checks_catch_commands_on_the_wrong_port() -> None:
    good = (
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 "
        "opentelemetry-instrument --metrics_exporter none --logs_exporter none python c.py"
    )
    assert otlp_command_problems([good]) == []
    # opentelemetry-distro defaults to gRPC: the HTTP port is wrong unless the protocol says http/protobuf.
    wrong = good.replace("4317", "4318")
    assert any("exports grpc to port 4318" in p for p in otlp_command_problems([wrong]))
    assert otlp_command_problems(["OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf " + wrong]) == []
    assert any(
        "exports http/protobuf to port 4317" in p
        for p in otlp_command_problems(["OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4317 acp-otel demo"])
    )
    assert any(
        "only traces and metrics pipelines" in p
        for p in otlp_command_problems([good.replace(" --logs_exporter none", "")])
    )
    # Commands are read from sh blocks, joined across continuation lines, without comments.
    markdown = (
        "text\n```sh\n# comment\nOTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 \\\n"
        "    opentelemetry-instrument python c.py\n```\n"
    )
    assert shell_commands(markdown) == [
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 opentelemetry-instrument python c.py"
    ]


def test_checks_catch_unbound_and_clashing_addresses(jaeger: dict[str, Any], collector: dict[str, Any]) -> None:
    raw = copy.deepcopy(load_raw("otel-collector.yaml"))
    raw["exporters"]["otlp/jaeger"]["endpoint"] = "jaeger:4317"
    assert any("otlp/jaeger" in p for p in env_problems(raw))
    broken = copy.deepcopy(jaeger)
    broken["extensions"]["jaeger_query"]["http"]["endpoint"] = "0.0.0.0:16686"
    assert any("listens on 0.0.0.0" in p for p in jaeger_problems(broken, collector))
    broken = copy.deepcopy(jaeger)
    broken["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] = "127.0.0.1:4317"
    assert any("takes port 4317" in p for p in jaeger_problems(broken, collector))
    broken = copy.deepcopy(jaeger)
    broken["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]["port"] = 8888
    assert any("takes port 8888" in p for p in jaeger_problems(broken, collector))
    del broken["extensions"]["jaeger_query"]["enable_tracing"]
    assert any("enable_tracing" in p for p in jaeger_problems(broken, collector))
    script = (CONFIG_DIR / "run-local.sh").read_text(encoding="utf-8")
    assert any(
        "Tempo" in p for p in run_local_problems(script.replace("[otlp/jaeger, debug]", "[otlp/jaeger]"), jaeger)
    )
    assert run_local_problems(script.replace("JAEGER_OTLP_GRPC_PORT:-14317", "JAEGER_OTLP_GRPC_PORT:-4317"), jaeger)
