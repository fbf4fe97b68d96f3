"""docker-compose.yml is valid and holds what the README's "Running on a cluster" promises.

Checked without a container runtime: against the Compose Specification's JSON schema (the
copy check-jsonschema ships and pins, a test dependency; the schema is Apache-2.0, from
github.com/compose-spec/compose-spec), then by the project's own rules. Where a Compose
client is already installed, `docker compose config` checks it too (skipped otherwise).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


def compose_schema() -> dict[str, Any]:
    """The Compose Specification's JSON schema (draft 2020-12)."""
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads((vendor / "compose-spec.json").read_text())


def schema_errors(document: Any) -> list[str]:
    """Every way ``document`` breaks the Compose schema, as 'path: message' lines."""
    schema = compose_schema()
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in sorted(validator.iter_errors(document), key=str)]


def load() -> dict[str, Any]:
    # PyYAML resolves the `<<: *autotune` merge keys as Compose does.
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_matches_the_compose_specification() -> None:
    assert schema_errors(load()) == []


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["services"]["service"].update(enviroment={}), "enviroment"),
    (lambda d: d["services"]["postgres"]["healthcheck"].update(interval=[2]), "interval"),
    (lambda d: d["services"]["cpu-worker"].update(depends_on=[1]), "depends_on"),
])
def test_the_schema_check_rejects_a_broken_file(mutate: Any, expected: str) -> None:
    document = load()
    mutate(document)
    errors = schema_errors(document)
    assert errors and any(expected in e for e in errors), errors


def _dockerfile_stages() -> set[str]:
    return set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", (REPO / "Dockerfile").read_text(),
                          re.M | re.I))


def test_services_environment_and_commands() -> None:
    services = load()["services"]
    assert {"postgres", "service", "ray-head", "cpu-worker", "gpu-worker"} == set(services)
    for name in ("service", "ray-head", "cpu-worker"):
        env = services[name]["environment"]
        assert env["AUTOTUNE_DB_URL"].startswith("postgresql+psycopg://"), name
        assert env["AUTOTUNE_RAY_ADDRESS"] == "ray-head:6379", name
        assert "profiles" not in services[name], f"{name} must start without a profile"
    # the service's database is the postgres service's, with its user, password and db
    pg = services["postgres"]["environment"]
    url = services["service"]["environment"]["AUTOTUNE_DB_URL"]
    assert url == (f"postgresql+psycopg://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}"
                   f"@postgres:5432/{pg['POSTGRES_DB']}")
    assert "AUTOTUNE_ALLOWED_HOSTS" in services["service"]["environment"]  # README's override
    assert "autotune serve" in services["service"]["command"]
    assert "--port 8000" in services["service"]["command"]
    assert "8000:8000" in services["service"]["ports"]
    assert "--head" in services["ray-head"]["command"]
    assert "6379:6379" in services["ray-head"]["ports"]
    assert "autotune worker" in " ".join(services["cpu-worker"]["command"])
    stages = _dockerfile_stages()
    for name, svc in services.items():
        if "build" in svc:
            assert svc["build"]["target"] in stages, f"{name}: no Dockerfile stage " \
                                                     f"{svc['build']['target']!r}"


def test_health_checks_back_every_healthy_condition() -> None:
    services = load()["services"]
    postgres = services["postgres"]["healthcheck"]
    assert "pg_isready" in " ".join(postgres["test"])
    for name, svc in services.items():
        depends = svc.get("depends_on", {})
        for other in depends:
            assert other in services, f"{name} depends on unknown {other}"
            if isinstance(depends, dict) and depends[other].get("condition") == \
                    "service_healthy":
                assert "healthcheck" in services[other], f"{other} has no health check"
    assert services["service"]["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_named_volumes_are_declared() -> None:
    document = load()
    declared = set(document.get("volumes") or {})
    for name, svc in document["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            if not source.startswith((".", "/", "~")):
                assert source in declared, f"{name}: volume {source!r} is not declared"
    assert any(v.startswith("pgdata:") for v in document["services"]["postgres"]["volumes"])


def test_gpu_worker_is_a_profile_with_the_nvidia_runtime() -> None:
    gpu = load()["services"]["gpu-worker"]
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["build"]["target"] == "gpu"
    assert "--no-cpu" in gpu["command"]


def _compose_client() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"],
                                 capture_output=True).returncode == 0:
        return [docker, "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def test_a_compose_client_accepts_it_where_one_is_installed() -> None:
    client = _compose_client()
    if client is None:
        pytest.skip("no compose client installed (the schema checks above stand in for it)")
    out = subprocess.run([*client, "--profile", "gpu", "config"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert set(yaml.safe_load(out.stdout)["services"]) == set(load()["services"])
