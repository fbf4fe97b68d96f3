"""The dashboard in a real headless Chromium (selenium): a submitted job appears in the list,
its best GFLOP/s updates without a reload, and its page draws live charts. Screenshots go to
test-artifacts/. Chromium comes from scripts/install-browser.sh; under CI=true a missing
browser fails the test instead of skipping it."""
from __future__ import annotations

import os
import shutil

import httpx
import pytest

from tests.service.service_helpers import ARTIFACTS, SMALL_MATMUL, create_key, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser():
    if not (CHROMIUM and DRIVER):
        message = "chromium and chromedriver are needed (scripts/install-browser.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1360,1000", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _number(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return 0.0


def test_dashboard_follows_a_job_live(make_server, browser) -> None:
    from selenium.webdriver.common.by import By

    server = make_server()
    key = create_key(server.db_url)
    server.start()
    ARTIFACTS.mkdir(exist_ok=True)
    with server.client(key) as c:
        # A finished job on the same workload gives the job page a second curve to compare.
        first = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 8,
                                             "tuner": "random", "seed": 11}).json()
        browser.get(server.url + "/")
        wait_for(lambda: browser.find_elements(By.ID, f"job-{first['id']}"), 20,
                 what="the first job's row")
        job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 32,
                                           "tuner": "ga", "seed": 2}).json()

    # The new job shows up in the already-open page, then its best GFLOP/s fills in.
    row = wait_for(lambda: browser.find_elements(By.ID, f"job-{job['id']}"), 20,
                   what="the new job's row")[0]
    assert "matmul(M=64,N=64,K=64)" in row.text
    reloads = browser.execute_script("return performance.getEntriesByType('navigation').length")
    best = wait_for(lambda: _number(row.find_element(By.CSS_SELECTOR, ".best").text), 120,
                    what="best GFLOP/s in the job list")
    assert best > 0
    assert browser.execute_script(
        "return performance.getEntriesByType('navigation').length") == reloads
    wait_for(lambda: row.find_elements(By.CSS_SELECTOR, ".spark-cell svg"), 20,
             what="the sparkline")
    browser.save_screenshot(str(ARTIFACTS / "dashboard-jobs.png"))

    # The job page: live stats, charts and tables, updated from the event stream.
    row.find_element(By.CSS_SELECTOR, "a").click()
    wait_for(lambda: browser.current_url.endswith(f"/jobs/{job['id']}"), 10, what="job page")
    wait_for(lambda: "GFLOP/s" in browser.find_element(By.ID, "stat-best").text, 120,
             what="the best GFLOP/s stat")
    seen = set()

    def trials_shown() -> int:
        done = int(_number(browser.find_element(By.ID, "stat-trials").text))
        seen.add(done)
        return done

    wait_for(lambda: trials_shown() >= 32 and
             browser.find_element(By.ID, "live-text").text == "done", 180,
             interval=0.3, what="the job to finish on its page")
    assert len(seen) >= 2, f"the trial count never changed live: {seen}"
    wait_for(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")) >= 32, 20,
             what="the job's trials")
    assert browser.find_elements(By.CSS_SELECTOR, "#chart-best svg path")
    legend = browser.find_element(By.ID, "legend-best").text
    assert f"#{first['id']} random" in legend  # the other tuner's curve
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, "#top details[open] pre"), 20,
             what="the top config's code")
    assert "for " in browser.find_element(By.CSS_SELECTOR, "#top details[open] pre").text
    # One best: the Best card, the chart's mark of the job's best and the top config show
    # the job's best_gflops (the re-timing window's winner), as the API does.
    with server.client(key) as c:
        final = c.get(f"/api/v1/jobs/{job['id']}").json()["best_gflops"]

    def shown() -> list:  # read in one script: the page redraws as answers come
        return browser.execute_script("""
            const text = (sel) => (document.querySelector(sel) || {}).textContent || "";
            return [text("#stat-best"), text("#legend-best .job-best").split(": ")[1] || "",
                    text("#top details strong")];""")

    figures = wait_for(lambda: (lambda got: got if all(
        _number(t) == pytest.approx(final, abs=0.051) for t in got) else None)(shown()), 20,
        what=f"the job's best {final} on its card, chart and top config")
    assert len(figures) == 3
    # Sorting the trials table pages on the server.
    browser.find_element(By.CSS_SELECTOR, "th[data-sort=gflops]").click()
    wait_for(lambda: "sorted" in browser.find_element(
        By.CSS_SELECTOR, "th[data-sort=gflops]").get_attribute("class"), 10, what="sort")
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1360, min(int(height) + 120, 4000))  # the whole page in one shot
    browser.save_screenshot(str(ARTIFACTS / "dashboard-job.png"))
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs


def _finished_job(client: httpx.Client, seed: int) -> dict:
    """A small random-search job, once it is done."""
    job = client.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 8,
                                            "tuner": "random", "seed": seed}).json()
    wait_for(lambda: client.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "done", 120,
             what=f"job {job['id']} to finish")
    return job


def test_top_configs_keep_code_in_view_when_the_best_is_overtaken(make_server, browser) -> None:
    """The top list opens the best config's code; when a refresh brings a top k that no
    longer holds the open config, the new best opens instead of leaving every entry shut."""
    from selenium.webdriver.common.by import By

    server = make_server()
    key = create_key(server.db_url)
    server.start()
    with server.client(key) as c:
        job = _finished_job(c, seed=3)

    def indices(selector: str) -> list[str]:  # read in one script: the list is re-rendered
        return browser.execute_script(
            f"return [...document.querySelectorAll('{selector}')].map((d) => d.dataset.index)")

    browser.get(f"{server.url}/jobs/{job['id']}")
    # Settled: the page's own two loads of the top list (at start, at the stream's end) are in.
    wait_for(lambda: browser.execute_script(
        "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/top?')"
        " && e.responseEnd > 0).length") >= 2, 20, what="the page's top-list loads")
    first = wait_for(lambda: indices("#top details[open]"), 20, what="the best config opened")[0]
    # Later configs overtake every one shown: the same page with other config indices.
    browser.execute_script("""
        const get = Api.get;
        Api.get = async (path) => {
          const page = await get(path);
          if (path.includes('/top')) page.items.forEach((t) => { t.config.index += 100000; });
          return page;
        };
        document.getElementById('top-form').dispatchEvent(new Event('change'));""")
    wait_for(lambda: first not in indices("#top details") and indices("#top details"), 20,
             what="the refreshed top list")
    assert indices("#top details[open]") == [str(int(first) + 100000)]
    assert "for " in browser.find_element(By.CSS_SELECTOR, "#top details[open] pre").text


def test_job_list_never_draws_a_stale_answer(make_server, browser) -> None:
    """A poll of the whole list still in flight when the reader picks a state filter must
    not redraw the unfiltered rows when it answers late."""
    from selenium.webdriver.common.by import By

    server = make_server()
    key = create_key(server.db_url)
    server.start()
    with server.client(key) as c:
        done = _finished_job(c, seed=4)
        other = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 8,
                                             "tuner": "random", "seed": 5}).json()
        assert c.post(f"/api/v1/jobs/{other['id']}/cancel").json()["state"] == "cancelled"
    browser.get(server.url + "/")
    wait_for(lambda: browser.find_elements(By.ID, f"job-{other['id']}"), 20, what="both rows")
    # Unfiltered answers now come a second late; a refresh starts one, then the reader
    # filters on "done". Every row added after the filter is recorded.
    browser.execute_script("""
        window.lateAnswers = 0; window.added = [];
        const get = Api.get;
        Api.get = async (path) => {
          const page = await get(path);
          if (path.startsWith('/jobs?') && !path.includes('state=')) {
            await new Promise((resolve) => setTimeout(resolve, 1000));
            window.lateAnswers += 1;
          }
          return page;
        };
        document.dispatchEvent(new Event('visibilitychange'));
        const filter = document.getElementById('state-filter');
        filter.value = 'done';
        filter.dispatchEvent(new Event('change'));
        new MutationObserver((records) => records.forEach((r) => r.addedNodes.forEach(
          (n) => window.added.push(n.id)))).observe(document.querySelector('#jobs tbody'),
                                                   { childList: true });""")
    wait_for(lambda: browser.execute_script("return window.lateAnswers") >= 1, 20,
             what="the late unfiltered answer")
    added = browser.execute_script("return window.added")
    assert f"job-{other['id']}" not in added, added
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#jobs tbody tr')].map((tr) => tr.id)")
    assert rows == [f"job-{done['id']}"]


def test_workers_view_and_who_measured_a_job(make_server, browser) -> None:
    """The Workers page lists this host's measuring executor and each target's load; a job's
    page counts its trials per worker, as the API does."""
    import socket

    from selenium.webdriver.common.by import By

    server = make_server()
    key = create_key(server.db_url)
    server.start()
    with server.client(key) as c:
        job = _finished_job(c, seed=6)
        by = c.get(f"/api/v1/jobs/{job['id']}/workers").json()["items"]
        listing = c.get("/api/v1/workers").json()
    local = f"local:{socket.gethostname()}"
    assert [w["worker"] for w in by] == [local] and by[0]["trials"] == 8

    browser.get(server.url + "/")
    browser.find_element(By.CSS_SELECTOR, 'nav a[href="/workers"]').click()
    def cell(selector: str) -> str:  # read in one script: the tables are redrawn every poll
        return browser.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null",
            selector)

    state = wait_for(lambda: cell(f'#workers tr[data-worker="{local}"] .state'), 20,
                     what="this host's row")
    assert state == "idle"  # busy only while a job holds it
    assert cell(f'#workers tr[data-worker="{local}"] .seen') == "just now"  # this very host
    # its counts are the trials table's, as on the job's page (they were "–" here)
    assert cell(f'#workers tr[data-worker="{local}"] .trials') == "8"
    assert cell(f'#workers tr[data-worker="{local}"] .failures') == str(by[0]["failed"])
    assert cell("#summary") == "measuring on this host · 1 live worker"
    (target,) = listing["targets"]
    assert cell(f'#targets tr[data-target="{target["target"]}"] .free') == str(target["free"])
    browser.save_screenshot(str(ARTIFACTS / "dashboard-workers.png"))

    browser.get(f"{server.url}/jobs/{job['id']}")
    row = f'#measured-by tr[data-worker="{local}"]'
    assert wait_for(lambda: cell(f"{row} .trials"), 20, what="measured by") == "8"
    assert cell(f"{row} .failed") == str(by[0]["failed"])
    assert not browser.find_element(By.ID, "waiting").is_displayed()
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs


def test_job_page_plots_the_current_models_scores_of_an_xgb_job(make_server, browser) -> None:
    """An xgb job's page draws one dot per valid trial scored by its latest model, titled
    with the batch that model was fit after; a tuner without a model says so instead."""
    from selenium.webdriver.common.by import By

    server = make_server()
    key = create_key(server.db_url)
    server.start()
    fast = {"min_records": 8, "workers": 0, "n_estimators": 30, "n_chains": 16, "sa_steps": 6}
    with server.client(key) as c:
        job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 16,
                                           "tuner": "xgb", "seed": 7,
                                           "tuner_options": fast}).json()
        wait_for(lambda: c.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "done", 240,
                 what=f"xgb job {job['id']} to finish")
        model = c.get(f"/api/v1/jobs/{job['id']}/curves").json()["current_model"]
        plain = _finished_job(c, seed=8)
    assert model is not None and model["batch"] == 8 and model["points"]

    def dots(chart: str) -> int:  # one "M x y h0" per dot in the chart's dots path
        return browser.execute_script(
            "const p = document.querySelector(arguments[0] + ' path.dots');"
            "return p ? (p.getAttribute('d').match(/M/g) || []).length : 0", chart)

    browser.get(f"{server.url}/jobs/{job['id']}")
    assert wait_for(lambda: dots("#chart-model"), 20, what="the model's scatter") == \
        len(model["points"])
    assert browser.find_element(By.ID, "model-title").text == \
        "Current model (fit after batch 8): score vs measured GFLOP/s"
    assert "Spearman" in browser.find_element(By.ID, "model-note").text or model["rho"] is None
    assert dots("#chart-rank") > 0  # the rank correlation per batch is still drawn
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "dashboard-job-model.png"))
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs

    browser.get(f"{server.url}/jobs/{plain['id']}")
    empty = wait_for(lambda: browser.execute_script(
        "const e = document.querySelector('#chart-model .empty'); return e && e.textContent"),
        20, what="the scatter's note for a tuner without a model")
    assert "no cost model" in empty and not dots("#chart-model")


def test_a_jobs_dtype_shows_in_the_list_and_on_its_page(make_server, browser) -> None:
    """A float16 job (made in the database as a tuning process on a GPU host would, then
    cancelled, so that this host without one never runs it) is named with its dtype in the
    list, and its page shows the dtype; a float32 job's page says float32."""
    from selenium.webdriver.common.by import By

    from autotune.db import Database
    from autotune.ops import workload
    from autotune.target import Target

    server = make_server()
    key = create_key(server.db_url)
    db = Database.open(server.db_url)
    try:
        half = db.create_job(workload=workload("matmul", M=64, N=64, K=64, dtype="float16"),
                             target=Target("cuda -arch=sm_90"), tuner="random", trials=8)
        db.set_job_state(half.id, "cancelled")
    finally:
        db.dispose()
    server.start()
    with server.client(key) as c:
        single = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 4,
                                              "tuner": "random"}).json()
    browser.get(server.url + "/")
    row = wait_for(lambda: browser.find_elements(By.ID, f"job-{half.id}"), 20,
                   what="the float16 job's row")[0]
    assert "matmul(M=64,N=64,K=64):float16" in row.find_element(By.CSS_SELECTOR, ".wl").text
    browser.get(f"{server.url}/jobs/{half.id}")
    wait_for(lambda: browser.find_element(By.ID, "stat-dtype").text == "float16", 20,
             what="the float16 job's dtype")
    assert browser.find_element(By.ID, "title").text.endswith(":float16")
    browser.get(f"{server.url}/jobs/{single['id']}")
    wait_for(lambda: browser.find_element(By.ID, "stat-dtype").text == "float32", 20,
             what="the float32 job's dtype")
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs


class _Synthetic:
    """Measures every workload on a synthetic objective of its own space (no kernel runs)."""

    def __init__(self, target) -> None:
        self.target, self.by = target, {}

    def submit(self, inputs):
        from autotune.driver import config_space
        from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective

        wl = inputs[0].workload
        if wl.key not in self.by:
            self.by[wl.key] = SyntheticExecutor(SyntheticObjective(config_space(wl, self.target)))
        return self.by[wl.key].submit(inputs)

    def __getattr__(self, name):  # the Executor protocol's defaults
        from autotune.measure.executor import Executor

        return getattr(Executor, name).__get__(self)


# Overflow of the page (px it scrolls sideways) and the tables wider than their cards.
_OVERFLOW = """
    const page = document.documentElement.scrollWidth - document.documentElement.clientWidth;
    const wide = [...document.querySelectorAll(".card > table")].filter((t) =>
      t.getBoundingClientRect().right > t.parentElement.getBoundingClientRect().right + 1)
      .map((t) => t.id);
    return [page, wide];"""


def test_pages_fit_the_window_at_1280_and_1920_px(make_server, browser, tmp_path) -> None:
    """Long labels (a fused, prepacked, strided conv's) once pushed the jobs list's last
    columns out of their card and the page sideways, even at 1920 px: each page must fit,
    its tables inside their cards. Model-run jobs show the trials they ran."""
    from selenium.webdriver.common.by import By

    from autotune.frontend import ModelTasks, Task, tune_tasks
    from autotune.ops import workload
    from autotune.target import Target

    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    target = Target("llvm -mcpu=skylake -cores=2")
    convs = [workload("conv2d", N=1, C=c, H=56, W=56, K=2 * c, R=3, S=3, stride=2, pad=1,
                      epilogue=["scale_shift", "residual", "relu"], prepacked=True)
             for c in (64, 128, 256)]
    model = ModelTasks("ResNetLikeWithALongName", tuple(
        Task(wl, 1, (f"layer{i}.0.conv1", f"layer{i}.0.conv2", f"layer{i}.1.conv1",
                     f"layer{i}.1.conv2")) for i, wl in enumerate(convs)), ())
    run_id = tune_tasks(model, trials=24, target=target, db=url, tuner="random",
                        executor=_Synthetic(target)).run_id
    server = make_server(url).start()
    with server.client() as c:
        jobs = c.get("/api/v1/jobs").json()["items"]
    assert {j["model_run"] for j in jobs} == {run_id}
    job = jobs[0]
    assert job["label"].endswith("dilation=(1,1))+scale_shift+residual+relu prepacked")
    assert "dilation" not in job["short_label"] and "stride=2,pad=1)" in job["short_label"]
    ARTIFACTS.mkdir(exist_ok=True)
    pages = {"jobs": "/", "runs": "/model-runs", "run": f"/model-runs/{run_id}",
             "job": f"/jobs/{job['id']}", "workers": "/workers"}
    for width in (1280, 1920):
        browser.set_window_size(width, 1000)
        for name, path in pages.items():
            browser.get(server.url + path)
            wait_for(lambda: browser.find_element(By.ID, "live-text").text != "connecting"
                     and (name == "workers" or browser.find_elements(
                         By.CSS_SELECTOR, "tbody tr td")), 20, what=f"the {name} page")
            page, wide = browser.execute_script(_OVERFLOW)
            assert page <= 0 and not wide, (width, name, page, wide)
            browser.save_screenshot(str(ARTIFACTS / f"dashboard-fit-{name}-{width}.png"))

    # the jobs list: short labels (the full one on hover), a run's jobs with their trials
    browser.get(server.url + "/")
    row = wait_for(lambda: browser.find_elements(By.ID, f"job-{job['id']}"), 20,
                   what="the job's row")[0]
    cell = row.find_element(By.CSS_SELECTOR, ".wl")
    assert cell.text == job["short_label"] and cell.get_attribute("title") == job["label"]
    assert row.find_element(By.CSS_SELECTOR, ".trials").text == \
        f"{job['trials_done']} trials run #{run_id}"
    # a finished run says so in the words of its badge; trial axes count in whole numbers
    browser.get(f"{server.url}/model-runs/{run_id}")
    wait_for(lambda: browser.find_element(By.ID, "live-text").text == "done", 20,
             what="the run's state")
    x_ticks = browser.execute_script(  # (the y axis' labels are anchored at their end)
        "return [...document.querySelectorAll('#chart-latency .axis text[text-anchor=middle]')]"
        ".map((t) => t.textContent)")
    assert x_ticks and all(t.isdigit() for t in x_ticks), x_ticks
    logs = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not logs, logs
