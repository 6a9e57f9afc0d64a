"""Deployment files stay consistent with the code (Docker cannot run here: checked by reading)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import yaml

from oahu.learners.oahu.learner import OAHU
from oahu.service.config import ServiceConfig
from oahu.service.config_sources import read_env
from oahu.service.metrics import LearningMetrics, ServiceMetrics

REPO = Path(__file__).resolve().parents[1]


def exposed_metric_names() -> set[str]:
    """What the serving process's /metrics shows: its own and the learner process's metrics,
    with the diagnostics OAHU (the default learner) declares, as a default OAHU reports them."""
    learning = LearningMetrics(OAHU.capabilities.diagnostics, drift_signals=("combined",))
    metrics = ServiceMetrics()
    # labelled families show samples once they have a child
    learning.lag.labels(partition="0").set(0)
    learning.dead_letters.labels(reason="undecodable").inc()
    learning.skipped.labels(reason="degenerate").inc()
    oahu = OAHU(4, hidden_width=8, device="cpu")
    rng = np.random.default_rng(0)
    oahu.prepare(rng.normal(size=(20, 4)))
    oahu.learn_triplets(*rng.normal(size=(3, 5, 4)))
    learning.set_diagnostics(oahu.diagnostics())
    metrics.request_seconds.labels(endpoint="/v1/classify", method="POST", status="200").observe(1)
    metrics.suggestions.labels(strategy="joint-entropy").inc()
    metrics.suggest_seconds.labels(strategy="joint-entropy").observe(1)
    metrics.forward(learning.families())
    names = set()
    for family in metrics.registry.collect():
        names.update(sample.name for sample in family.samples)
        names.add(family.name)
    return names


def test_every_dashboard_query_uses_a_metric_the_service_exposes():
    dashboard = json.loads((REPO / "deploy" / "grafana-dashboard.json").read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\boahu_[a-z_]+", target["expr"])
    }
    exposed = exposed_metric_names()
    assert used and used <= exposed, used - exposed
    required = {  # what an operator charts to run the service
        "oahu_constraints_consumed_total", "oahu_constraints_learned_total",
        "oahu_dead_letters_total", "oahu_constraint_utilization", "oahu_hedge_weight",
        "oahu_depth_loss", "oahu_update_duration_seconds_bucket", "oahu_consumer_lag",
        "oahu_checkpoint_age_seconds", "oahu_checkpoint_duration_seconds_bucket",
        "oahu_gallery_items", "oahu_gallery_reindex_timestamp_seconds",
        "oahu_http_request_duration_seconds_bucket", "oahu_constraints_skipped_total",
        "oahu_prequential_accuracy",  # what shows the model getting better
        "oahu_drift_detected_total",  # concept drift
    }  # fmt: skip
    assert required <= used, required - used


def test_compose_runs_kafka_oahu_and_prometheus_with_valid_settings():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]  # KRaft
    env = {k: str(v) for k, v in services["oahu"]["environment"].items()}
    config = ServiceConfig(**read_env(env))  # every OAHU_* variable is a real, valid setting
    assert config.kafka_target() == ("kafka:9092", "constraints", "oahu")
    assert config.kafka == {"group_instance_id": "oahu-0"}
    assert all(k.removeprefix("OAHU_").lower().split("__")[0] in (
        *ServiceConfig.__dataclass_fields__, ) for k in env)  # fmt: skip
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    job = prometheus["scrape_configs"][0]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["oahu:8000"]
    assert (
        "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro"
        in (services["prometheus"]["volumes"])
    )


def test_dockerfile_is_slim_non_root_and_health_checked():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+-slim$", text, re.M)
    assert re.search(r"^USER oahu$", text, re.M)
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert "download.pytorch.org/whl/cpu" in text  # CPU build of torch
    (checked,) = re.findall(r'pip install /src .* python -c "import ([^";]+)"', text)
    for module in checked.split(", "):
        assert importlib.util.find_spec(module) is not None, module


def test_replicas_compose_runs_a_learner_and_three_replicas_behind_haproxy():
    folder = REPO / "deploy" / "replicas"
    services = yaml.safe_load((folder / "docker-compose.yml").read_text())["services"]
    learner = ServiceConfig(**read_env({k: str(v) for k, v in
                                        services["learner"]["environment"].items()}))  # fmt: skip
    assert learner.publish_model == "kafka://kafka:9092/oahu-model"
    replicas = sorted(name for name in services if name.startswith("replica"))
    assert replicas == ["replica1", "replica2", "replica3"]
    for name in replicas:
        assert services[name]["command"] == ["serve"]
        env = {k: str(v) for k, v in services[name]["environment"].items()}
        config = ServiceConfig(**read_env(env))
        assert config.model_topic == learner.publish_model
        assert config.gallery == learner.gallery and config.items == learner.items
    haproxy = (folder / "haproxy.cfg").read_text()
    assert "option httpchk GET /readyz" in haproxy  # only ready replicas get queries
    servers = re.findall(r"^\s+server (\S+) (\S+):8000 check$", haproxy, re.M)
    assert [(name, host) for name, host in servers] == [(r, r) for r in replicas]
    assert "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in services["balancer"]["volumes"]


def test_the_replicas_haproxy_config_is_valid_for_haproxy(tmp_path):
    """HAProxy itself checks the configuration (the compose names resolved to loopback)."""
    text = (REPO / "deploy" / "replicas" / "haproxy.cfg").read_text()
    local = re.sub(r"replica(\d):8000", r"127.0.0.1:800\1", text)
    (tmp_path / "haproxy.cfg").write_text(local)
    done = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Configuration file is valid" in done.stdout + done.stderr
