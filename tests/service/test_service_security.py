"""Keys, hosts and cross-site writes: an ambiguous key prefix revokes nothing, the database
password is never printed, an unauthenticated service binds only loopback, refuses
cross-site writes, and answers only the Host names it is configured for."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from sqlalchemy import update
from sqlalchemy.engine import make_url

from autotune.cli import main
from autotune.db import Database
from autotune.db.schema import ApiKeyRow
from tests.service.service_helpers import SMALL_MATMUL, free_port

pytestmark = pytest.mark.timeout(240)

CLI = [sys.executable, "-m", "autotune.cli"]


def test_an_ambiguous_key_prefix_revokes_nothing(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    db = Database.open(url)
    try:
        first, second = db.create_api_key("a"), db.create_api_key("b")
        with db.session(write=True) as s:  # a prefix collision (rare, but keys are random)
            s.execute(update(ApiKeyRow).values(prefix=first[:8]))
        assert main(["apikey", "revoke", first[:8], "--db", url]) == 2
        assert "matches 2 active keys" in capsys.readouterr().err
        assert db.verify_api_key(first) and db.verify_api_key(second)
        # The whole key names one of them.
        assert main(["apikey", "revoke", second, "--db", url]) == 0
        assert db.verify_api_key(first) and not db.verify_api_key(second)
        assert main(["apikey", "revoke", first[:8], "--db", url]) == 0  # now unambiguous
        assert not db.verify_api_key(first)
    finally:
        db.dispose()


def test_the_database_password_is_never_printed(fresh_pg_url, tmp_path) -> None:
    # The test server trusts every local connection, so any password is accepted.
    url = make_url(fresh_pg_url).set(password="s3cret-pw").render_as_string(hide_password=False)
    best = subprocess.run([*CLI, "best", "matmul", "-p", "M=8", "-p", "N=8", "-p", "K=8",
                           "--db", url], capture_output=True, text=True, timeout=120)
    assert best.returncode == 1 and "no valid record" in best.stderr
    assert "s3cret-pw" not in best.stderr and "***" in best.stderr
    # `serve --demo` names its database at start (and starts the demo run: stopped at once).
    demo = subprocess.Popen([*CLI, "serve", "--demo", "--db", url, "--port", str(free_port())],
                            cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert demo.stderr is not None
        line = demo.stderr.readline()
        while line and "dashboard at" not in line:
            line = demo.stderr.readline()
    finally:
        os.killpg(demo.pid, signal.SIGKILL)
        demo.wait(10)
    assert "dashboard at" in line and "s3cret-pw" not in line and "***" in line


def test_without_auth_the_service_refuses_a_public_address(tmp_path) -> None:
    env = {**os.environ, "AUTOTUNE_AUTH_DISABLED": "1"}
    proc = subprocess.Popen([*CLI, "serve", "--db", f"sqlite:///{tmp_path / 'a.db'}",
                             "--host", "0.0.0.0", "--port", str(free_port())], cwd=tmp_path,
                            env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise AssertionError("the service bound 0.0.0.0 with auth disabled") from None
    assert proc.returncode == 2 and "loopback" in err and "0.0.0.0" in err


def test_cross_site_writes_and_foreign_hosts_are_refused(make_server) -> None:
    server = make_server(AUTOTUNE_AUTH_DISABLED="1",
                         AUTOTUNE_ALLOWED_HOSTS="dashboard.example")
    server.start()
    with server.client() as c:
        job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 2,
                                           "tuner": "random"})
        assert job.status_code == 201, job.text
        cancel = f"/api/v1/jobs/{job.json()['id']}/cancel"
        # What a form on another site's page can send: no JSON, and the browser's headers.
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        for headers in ({**form, "Origin": "http://evil.example"},
                        {**form, "Sec-Fetch-Site": "cross-site"},
                        {"Content-Type": "text/plain", "Origin": "null"},
                        form):
            refused = c.post(cancel, content=b"x=1", headers=headers)
            assert refused.status_code == 403, (headers, refused.text)
            assert "another site" in refused.json()["detail"]
        assert c.get(f"/api/v1/jobs/{job.json()['id']}").json()["state"] != "cancelled"
        # The dashboard's own page (same origin), and a client sending JSON, may write.
        same = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
        assert c.post(cancel, headers=same).status_code == 200
        assert c.post(cancel, json={}).status_code == 200

        # Host header check: the bind host and the configured names only.
        assert c.get("/api/v1/health", headers={"Host": "evil.example"}).status_code == 400
        assert c.get("/api/v1/health",
                     headers={"Host": "dashboard.example"}).status_code == 200
        assert c.get("/api/v1/health").status_code == 200  # 127.0.0.1, the bind host
