"""The web console in a real browser (Debian's headless Chromium, driven through its chromedriver
by Selenium) against a real ``oahu run``: the live view's curve grows as the model learns, the
explorer shows neighbour pictures of a Fashion-MNIST item, bad input is explained in the page,
and answers given on the annotation page reach the learner once each across a kill -9.

``scripts/test`` installs chromium and chromium-driver; without them these tests fail, naming
that command (the console is a capability, not an optional extra).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from service_support import ServiceProcess, free_port, make_stream, wait_until

from oahu.streams.benchmark_stream import build_stream
from oahu.streams.datasets import load_dataset

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    assert not missing, (
        f"{missing} not installed: the README's test command (./scripts/test) installs Debian's "
        "chromium and chromium-driver"
    )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=DriverService(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def js(driver: WebDriver, script: str) -> Any:
    return driver.execute_script(script)


def text(driver: WebDriver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def stop(service: ServiceProcess) -> None:
    if service.proc.poll() is None:
        service.terminate()


# ---------------------------------------------------------------------- live view
def test_the_live_view_draws_a_curve_that_grows_as_the_model_learns(tmp_path, browser):
    n = 60_000
    stream = make_stream(tmp_path, n, seed=3)
    # small polls: reports (and so curve points) come every few hundred constraints
    args = ["--source", stream.as_uri(), "--checkpoint-dir", str(tmp_path / "state"),
            "--poll-records", "100"]  # fmt: skip
    service = ServiceProcess(args, tmp_path / "run.log")
    try:
        service.wait_serving()
        browser.get(service.base + "/")
        assert browser.title == "oahu · live"

        def points() -> int:
            return int(js(browser, "return window.oahuCharts.accuracy?.data[0].length ?? 0"))

        first = wait_until(points, 30, "the first points of the curve")
        seen_first = int(text(browser, "seen").replace(",", ""))
        later = wait_until(lambda: points() > first + 5 and points(), 60, "the curve to grow")
        model = service.model()
        assert model is not None and model["constraints_seen"] < n  # still learning: live
        seen_later = int(text(browser, "seen").replace(",", ""))
        assert later > first and seen_later > seen_first
        # three charts drawn as canvases, one series per depth and the combined one
        assert len(browser.find_elements(By.CSS_SELECTOR, "#accuracy-chart canvas")) == 1
        assert len(browser.find_elements(By.TAG_NAME, "canvas")) == 3
        n_depths = model["n_depths"]
        assert js(browser, "return window.oahuCharts.accuracy.series.length") == n_depths + 2
        assert js(browser, "return window.oahuCharts.alpha.series.length") == n_depths + 1
        # the curve's last point is the learner's, as reported: x constraints seen, y accuracy
        xs = js(browser, "return window.oahuCharts.accuracy.data[0]")
        ys = js(browser, "return window.oahuCharts.accuracy.data[1]")
        assert xs == sorted(xs) and 0 < xs[-1] <= service.model()["constraints_seen"]
        assert all(0.5 < y <= 1.0 for y in ys[1:])  # digits: the model is right most of the time
        assert text(browser, "ready") == "yes"
        assert "0" in text(browser, "lag")  # partition 0 of the stream file
    finally:
        stop(service)


# ---------------------------------------------------------------------- explorer
def fashion_stream(directory: Path, n_items: int = 3000, n_constraints: int = 500) -> Path:
    """A small Fashion-MNIST stream: the first ``n_items`` images (28 × 28)."""
    full = load_dataset("fashion-mnist")
    subset = dataclasses.replace(full, X=full.X[:n_items], y=full.y[:n_items])
    stream = build_stream(subset, n_constraints, seed=0)
    assert stream.image_shape == (28, 28)  # recorded in the stream file for the service
    path = directory / "fashion.npz"
    stream.save(path)
    return path


def test_the_explorer_shows_k_neighbour_pictures_of_a_fashion_mnist_item(tmp_path, browser):
    stream = fashion_stream(tmp_path)
    args = ["--source", stream.as_uri(), "--checkpoint-dir", str(tmp_path / "state")]
    service = ServiceProcess(args, tmp_path / "run.log")
    try:
        service.wait_serving(timeout=120)
        service.wait_consumed(500)
        # the final model's snapshot, so that the page and the API below answer from one model
        wait_until(
            lambda: (m := service.model())["snapshot"]["updates"] == m["updates"], 60, "a snapshot"
        )
        page = httpx.get(service.base + "/v1/console/gallery?n=1&seed=4").json()
        assert page["image_shape"] == [28, 28]
        item = page["items"][0]["id"]
        browser.get(f"{service.base}/explore?id={item}")
        k = 8

        def shown() -> list[Any]:
            return browser.find_elements(By.CSS_SELECTOR, "#model img")

        wait_until(lambda: len(shown()) == k, 30, f"{k} neighbour pictures under the model")
        euclidean = browser.find_elements(By.CSS_SELECTOR, "#euclidean img")
        assert len(euclidean) == k
        query = browser.find_elements(By.CSS_SELECTOR, "#query img")
        assert len(query) == 1
        loaded = (
            "return Array.from(document.querySelectorAll('#query img, #model img, #euclidean img'))"
            ".every(img => img.complete && img.naturalWidth > 0)"
        )
        wait_until(lambda: js(browser, loaded), 30, "every picture to load")
        for img in [*shown(), *euclidean, *query]:
            response = httpx.get(img.get_attribute("src"))
            assert response.status_code == 200
            assert response.headers["content-type"] == "image/png"
            assert response.content.startswith(b"\x89PNG\r\n\x1a\n")
        # the page's neighbours are the API's, for the snapshot it names
        ids = [e.text.removeprefix("id ") for e in browser.find_elements(
            By.CSS_SELECTOR, "#model .item > div:nth-of-type(1)")]  # fmt: skip
        api = httpx.post(service.base + "/v1/retrieve", json={"items": [{"id": item}], "k": k + 1})
        expected = [r["id"] for r in api.json()["results"][0] if r["id"] != item][:k]
        assert ids == expected
        snapshot = api.json()["model"]["snapshot"]
        assert text(browser, "model-title").startswith(f"Served model · snapshot #{snapshot} ")

        # bad input is explained in the page, and the API said 4xx
        box = browser.find_element(By.ID, "item-id")
        box.clear()
        box.send_keys("no-such-item")
        browser.find_element(By.ID, "show").click()
        message = wait_until(lambda: text(browser, "error"), 10, "an error message")
        assert message.startswith("404") and "no-such-item" in message
        vector = browser.find_element(By.ID, "vector")
        vector.send_keys("0.1, 0.2, 0.3")
        browser.find_element(By.ID, "search").click()
        message = wait_until(
            lambda: text(browser, "error").startswith("422") and text(browser, "error"),
            10,
            "the vector's length refused",
        )
        assert "x" in message and "784" in message
        vector.clear()
        vector.send_keys("0.1, oops, 0.3")
        browser.find_element(By.ID, "search").click()
        wait_until(lambda: '"oops"' in text(browser, "error"), 10, "the bad number named")

        # a random page of the gallery: 24 pictures, one click shows that item's neighbours
        browser.find_element(By.ID, "browse").click()
        wait_until(
            lambda: len(browser.find_elements(By.CSS_SELECTOR, "#gallery img")) == 24,
            10,
            "a page of the gallery",
        )
        browser.find_elements(By.CSS_SELECTOR, "#gallery .item")[5].click()
        wait_until(lambda: "id=" in browser.current_url, 10, "the picked item's neighbours")
    finally:
        stop(service)


# ---------------------------------------------------------------------- annotation
def answer_on_page(browser: WebDriver, count: int) -> None:
    """Answer ``count`` questions with the keyboard (``1``: the first is more similar), each
    once the page shows a question, waiting until the service accepted it."""
    for _ in range(count):
        done = int(text(browser, "accepted"))
        wait_until(
            lambda: browser.find_element(By.ID, "answer-first").is_enabled(),
            60,
            "a question on the page",
        )
        browser.find_element(By.TAG_NAME, "body").send_keys("1")
        wait_until(lambda done=done: int(text(browser, "accepted")) == done + 1, 60, "acceptance")


def test_answers_given_on_the_page_are_learned_once_each_across_a_kill_9(tmp_path, browser):
    n = 1500
    stream = make_stream(tmp_path, n, seed=8)
    state = tmp_path / "state"
    args = ["--source", stream.as_uri(), "--checkpoint-dir", str(state)]
    port = free_port()
    first = ServiceProcess(args, tmp_path / "first.log", port=port)
    second = None
    try:
        first.wait_consumed(n)
        browser.get(first.base + "/annotate")
        name = browser.find_element(By.ID, "annotator")
        name.clear()
        name.send_keys("ada\t")  # the change event keeps it in the browser
        answer_on_page(browser, 12)
        wait_until(lambda: first.model()["constraints_consumed"] == n + 12, 30, "12 answers")
        first.kill()  # between two answers: the page shows the next question meanwhile
        time.sleep(1.0)
        second = ServiceProcess(args, tmp_path / "second.log", port=port)
        second.wait_serving()
        answer_on_page(browser, 8)
        model = wait_until(
            lambda: (m := second.model()) and m["constraints_consumed"] == n + 20 and m,
            30,
            "all 20 answers consumed",
        )
        # each answer learned once: the stream's constraints and the 20 answers, no duplicate
        assert model["constraints_seen"] == n + 20
        assert model["dead_letters"] == {}
        lines = (state / "answers.jsonl").read_text().splitlines()
        assert len(lines) == 20
        metrics = httpx.get(second.base + "/metrics").text
        assert 'oahu_console_answers_total{annotator="ada",choice="first"} 8.0' in metrics
        assert int(text(browser, "accepted")) == 20
    finally:
        for service in (first, second):
            if service is not None:
                stop(service)


def test_console_pages_are_html_with_their_own_scripts(tmp_path):
    """Without a browser: each page's HTML loads its own script and only vendored files."""
    stream = make_stream(tmp_path, 200, seed=1)
    args = ["--source", stream.as_uri(), "--checkpoint-dir", str(tmp_path / "state")]
    service = ServiceProcess(args, tmp_path / "run.log")
    try:
        service.wait_serving()
        for path, script in (("/", "live"), ("/explore", "explore"), ("/annotate", "annotate")):
            page = httpx.get(service.base + path)
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert f'<script src="/console/static/{script}.js"></script>' in page.text
            assert "http://" not in page.text and "https://" not in page.text  # works offline
        chart = httpx.get(service.base + "/console/static/vendor/uplot/uPlot.iife.min.js")
        assert chart.status_code == 200 and b"uPlot" in chart.content
        service.wait_consumed(200)

        def settled() -> dict[str, Any] | None:
            live = httpx.get(service.base + "/v1/console/live").json()
            return live if live["curve"]["seen"][-1:] == [200] else None

        live = wait_until(settled, 30, "the curve to reach the last constraint")
        assert set(live) == {"curve", "now"}
        assert live["now"]["constraints_seen"] == 200
        curve = live["curve"]
        assert curve["seen"] == sorted(curve["seen"]) and curve["accuracy"][0] is None
        assert len(curve["alpha"]) == live["now"]["n_depths"]
        assert np.allclose([a[-1] for a in curve["alpha"]], live["now"]["alpha"])
    finally:
        stop(service)


def test_with_an_auth_token_the_annotation_page_asks_for_it_and_then_works(tmp_path, browser):
    stream = make_stream(tmp_path, 300, seed=2)
    args = ["--source", stream.as_uri(), "--checkpoint-dir", str(tmp_path / "state"),
            "--auth-token", "s3cret"]  # fmt: skip
    service = ServiceProcess(args, tmp_path / "run.log")
    try:
        service.wait_consumed(300)
        browser.get(service.base + "/annotate")
        browser.execute_script("window.localStorage.clear()")  # no token kept from before
        browser.refresh()
        wait_until(lambda: text(browser, "message").startswith("401"), 30, "the 401 said")
        assert not browser.find_element(By.ID, "answer-first").is_enabled()
        name = browser.find_element(By.ID, "annotator")
        name.clear()
        name.send_keys("bob\t")
        browser.find_element(By.ID, "token").send_keys("s3cret\t")
        wait_until(
            lambda: browser.find_element(By.ID, "answer-first").is_enabled(), 30, "a question"
        )
        assert text(browser, "message") == ""  # the 401 is over, and not left on the page
        browser.find_element(By.TAG_NAME, "body").send_keys("2")
        wait_until(lambda: text(browser, "accepted") == "1", 30, "the answer accepted")
        wait_until(
            lambda: service.model()["constraints_consumed"] == 301, 30, "the answer learned"
        )
        metrics = httpx.get(service.base + "/metrics").text
        assert 'oahu_console_answers_total{annotator="bob",choice="second"} 1.0' in metrics
    finally:
        stop(service)
