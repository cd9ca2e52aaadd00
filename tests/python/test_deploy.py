"""Cross-checks of the deployment files against the server itself (the linters and schema
checks run in `make deploy-check`): probes and health checks name documented health
endpoints, environment and arguments are real flags, termination leaves time to drain, and
every dashboard query parses and names a metric the server exports or one planned for it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from multiprocessing import shared_memory

import pytest
import yaml

from openapi_spec import spec
from tensorport_server import REPO, server_binary

DEPLOY = REPO / "deploy"


def _yaml(path):
    return yaml.safe_load(path.read_text())


def _deployment():
    return _yaml(DEPLOY / "k8s" / "deployment.yaml")


def _serve_flags() -> tuple[set[str], set[str]]:
    """The `serve` flags and their environment variables, from --help."""
    help_text = subprocess.run([str(server_binary()), "serve", "--help"], capture_output=True, text=True,
                               check=True).stdout
    return set(re.findall(r"--([a-z][a-z0-9-]+)", help_text)), set(re.findall(r"env: (TENSORPORT_[A-Z_]+)", help_text))


def test_probes_and_healthcheck_use_documented_health_endpoints():
    paths = spec()["paths"]
    container = _deployment()["spec"]["template"]["spec"]["containers"][0]
    port_names = {p["name"] for p in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        http_get = container[probe]["httpGet"]
        assert http_get["path"] in paths and "get" in paths[http_get["path"]], probe
        assert http_get["port"] in port_names, probe
    # Readiness must follow the models and the drain, which only the model-independent
    # readiness endpoint does; liveness must not (a draining server is alive).
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    healthcheck = re.search(r"^HEALTHCHECK .*?_PORT\}(/\S*?)\"", (DEPLOY / "Dockerfile").read_text(), re.S | re.M)
    assert healthcheck and healthcheck.group(1) == "/readyz"


def test_service_targets_the_container_ports():
    container = _deployment()["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service = _yaml(DEPLOY / "k8s" / "service.yaml")
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in ports
    assert service["spec"]["selector"] == _deployment()["spec"]["selector"]["matchLabels"]
    assert ports == {"grpc": 8500, "http": 8501}


def test_arguments_and_environment_are_real_flags():
    flags, env_vars = _serve_flags()
    container = _deployment()["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "serve"
    for arg in container["args"][1:]:
        if arg.startswith("--"):
            assert arg[2:] in flags, arg
    for var in container.get("env", []):
        assert var["name"] in env_vars, var["name"]
    compose = _yaml(REPO / "docker-compose.yml")
    for name in compose["services"]["tensorport"]["environment"]:
        assert name in env_vars, name
    for name in re.findall(r"\b(TENSORPORT_[A-Z_]+)=", (DEPLOY / "Dockerfile").read_text()):
        assert name in env_vars, name


def test_the_runtime_stage_builds_alone_and_the_images_add_their_files_to_it():
    """`make image-check` builds `--target runtime` on a base image of its own with the legacy
    builder, which builds every stage before its target: the runtime stage must come first and
    take nothing from other stages or the build context. The check then adds the host's files
    where the onnx stage's COPY lines put theirs."""
    stages = re.split(r"^(?=FROM )", (DEPLOY / "Dockerfile").read_text(), flags=re.MULTILINE)[1:]
    assert stages[0].startswith("FROM ${RUNTIME_IMAGE} AS runtime\n"), stages[0]
    assert not re.search(r"^(COPY|ADD) ", stages[0], re.MULTILINE), stages[0]
    assert stages[-1].startswith("FROM runtime AS onnx\n"), "the default image is the last stage"
    for target in ("onnx", "all-backends"):
        [stage] = [s for s in stages if s.startswith(f"FROM runtime AS {target}\n")]
        assert re.search(r"^COPY --from=ort /libonnxruntime\.so \$\{ORT_DYLIB_PATH\}$", stage, re.MULTILINE), stage
        assert re.search(r"^COPY --from=\S+ \S+/tensorport /usr/local/bin/tensorport$", stage, re.MULTILINE), stage


def test_termination_leaves_time_to_drain():
    pod = _deployment()["spec"]["template"]["spec"]
    pre_stop = int(pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + 20
    compose_grace = _yaml(REPO / "docker-compose.yml")["services"]["tensorport"]["stop_grace_period"]
    assert compose_grace == f"{pod['terminationGracePeriodSeconds']}s"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["models"]["persistentVolumeClaim"]["readOnly"] is True


def test_prometheus_scrapes_the_metrics_endpoint():
    config = _yaml(DEPLOY / "prometheus" / "prometheus.yml")
    [job] = config["scrape_configs"]
    assert job["metrics_path"] in spec()["paths"]
    assert job["static_configs"][0]["targets"] == ["tensorport:8501"]


def _dashboards() -> dict[str, dict]:
    """Every dashboard Grafana's provisioning loads (docker-compose mounts the folder)."""
    return {path.name: json.loads(path.read_text())
            for path in sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))}


def _dashboard_queries(name: str | None = None) -> list[str]:
    queries = []
    for file, dashboard in _dashboards().items():
        if name in (None, file):
            queries += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
            queries += [v["definition"] for v in dashboard["templating"]["list"]]
    return queries


def test_dashboards_are_provisioned_with_unique_ids():
    dashboards = _dashboards()
    assert {"tensorport.json", "rollout.json"} <= set(dashboards)
    uids = [d["uid"] for d in dashboards.values()]
    assert len(uids) == len(set(uids)), uids
    for dashboard in dashboards.values():
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids)), (dashboard["uid"], ids)
    provider = _yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "tensorport.yml")["providers"][0]
    compose = _yaml(REPO / "docker-compose.yml")
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in mounts


def test_rollout_dashboard_shows_split_shadow_and_scores_side_by_side():
    referenced = set().union(*(_metric_names(q) for q in _dashboard_queries("rollout.json")))
    assert {"tensorport_traffic_split_requests_total", "tensorport_traffic_split_weight",
            "tensorport_shadow_copies_sent_total", "tensorport_shadow_copies_dropped_total",
            "tensorport_shadow_max_abs_difference_bucket", "tensorport_model_output_score_bucket"} <= referenced
    # The score panels keep versions apart, so a canary's distribution shows beside the stable one's.
    score_queries = [q for q in _dashboard_queries("rollout.json") if "model_output_score" in q]
    assert score_queries and all("version" in q for q in score_queries)


def _metric_names(query: str) -> set[str]:
    return set(re.findall(r"\b((?:tensorport|process)_[a-z0-9_]+)", query))


def test_dashboard_queries_parse(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: `make tools` installs it (Debian package prometheus)", pytrace=False)
    # Grafana's variables are not PromQL; stand-ins that parse take their place.
    exprs = [q.replace("$__rate_interval", "1m").replace("$model", ".*") for q in _dashboard_queries()
             if not q.startswith("label_values")]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    run = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_dashboard_metrics_are_exported_or_planned(http, rest_url):
    # An output written into shared memory is a copy the server counts, so every metric
    # family it has today shows up in /metrics.
    name = f"tp_deploy_{uuid.uuid4().hex[:8]}"
    region = shared_memory.SharedMemory(name=name, create=True, size=64)
    try:
        http.post(f"{rest_url}/v2/systemsharedmemory/region/{name}/register",
                  json={"key": "/" + name, "byte_size": 64}).raise_for_status()
        http.post(f"{rest_url}/v2/models/ranker/infer", json={
            "inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}],
            "outputs": [{"name": "score", "parameters": {"shared_memory_region": name,
                                                         "shared_memory_byte_size": 4}}],
        }).raise_for_status()
        metrics_text = http.get(f"{rest_url}/metrics").text
        http.post(f"{rest_url}/v2/systemsharedmemory/region/{name}/unregister").raise_for_status()
    finally:
        region.close()
        region.unlink()
    exported = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            suffixes = {"counter": ["", "_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(kind, [""])
            exported |= {name + suffix for suffix in suffixes}
    # The rollout dashboard's metrics exist once a model has a [traffic] section:
    # test_traffic.py checks them against such a server.
    referenced = set().union(*(_metric_names(q) for q in _dashboard_queries("tensorport.json")))
    unknown = referenced - exported
    assert not unknown, f"the dashboard queries metrics the server does not export: {sorted(unknown)}"
    assert {"tensorport_shared_memory_regions", "tensorport_tensor_copied_bytes_total"} <= referenced
    assert {"tensorport_model_ready", "process_cpu_seconds_total"} <= referenced
