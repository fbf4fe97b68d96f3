"""docker-compose.yml is valid (checked with a real Compose client; no Docker engine runs
here) and holds what the README's "Running on a cluster" promises."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _compose() -> list[str]:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"],
                                 capture_output=True).returncode == 0:
        return [docker, "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    message = "no compose client (scripts/install-compose.sh installs one)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _config(*args: str) -> dict:
    out = subprocess.run([*_compose(), *args, "config"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)


def test_compose_file_is_valid_and_complete() -> None:
    config = _config()
    services = config["services"]
    assert {"postgres", "service", "ray-head", "cpu-worker"} <= set(services)
    env = services["service"]["environment"]
    assert env["AUTOTUNE_DB_URL"].startswith("postgresql+psycopg://")
    assert env["AUTOTUNE_RAY_ADDRESS"] == "ray-head:6379"
    assert "autotune worker" in " ".join(services["cpu-worker"]["command"])


def test_gpu_worker_is_a_profile_with_the_nvidia_runtime() -> None:
    gpu = _config("--profile", "gpu")["services"]["gpu-worker"]
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert gpu["build"]["target"] == "gpu"
