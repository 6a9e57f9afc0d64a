"""Screenshots of the web console's three pages for docs/ and the README.

Starts ``oahu run`` on a Fashion-MNIST stream (``--constraints``, default 20,000: the live view
then shows a curve with some history), waits until it has learned ``--wait-for`` of them, and
saves with Debian's headless Chromium:

* ``docs/console-live.png``: the live view;
* ``docs/console-explore.png``: the explorer on one test-split item's neighbours;
* ``docs/console-annotate.png``: the annotation page after a few answers.

    ./scripts/oahu datasets list >/dev/null   # (the venv exists)
    ~/.cache/oahu/venv/bin/python scripts/console_screenshots.py
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--constraints", type=int, default=20_000)
    parser.add_argument("--wait-for", type=int, default=12_000, help="constraints learned first")
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from oahu.streams.benchmark_stream import build_stream

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="oahu-console-shots-") as tmp:
        stream = build_stream("fashion-mnist", args.constraints, seed=args.seed)
        stream_file = Path(tmp) / "fashion-mnist.npz"
        stream.save(stream_file)
        cmd = [sys.executable, "-m", "oahu.cli.main", "run", "--source", stream_file.as_uri(),
               "--checkpoint-dir", str(Path(tmp) / "state"), "--http", f"127.0.0.1:{port}",
               "--poll-records", "200", "--log-level", "warning"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1320,1000"):  # fmt: skip
            options.add_argument(arg)
        driver = webdriver.Chrome(service=DriverService("/usr/bin/chromedriver"), options=options)
        try:
            wait(lambda: httpx.get(base + "/readyz").status_code == 200, 300, "the service")
            wait(
                lambda: httpx.get(base + "/v1/model").json()["constraints_seen"] >= args.wait_for,
                600,
                f"{args.wait_for} constraints learned",
            )
            driver.get(base + "/")
            time.sleep(3)
            driver.save_screenshot(str(args.out / "console-live.png"))

            item = str(stream.dev_idx[7])
            driver.get(f"{base}/explore?id={item}")
            wait(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#model img")) == 8, 30,
                 "the neighbours")  # fmt: skip
            time.sleep(1)
            driver.save_screenshot(str(args.out / "console-explore.png"))

            def asked() -> bool:
                return driver.find_element(By.ID, "answer-first").is_enabled()

            driver.get(base + "/annotate")
            name = driver.find_element(By.ID, "annotator")
            name.clear()
            name.send_keys("ada\t")
            for _ in range(3):
                done = int(driver.find_element(By.ID, "accepted").text)
                wait(asked, 30, "a question")
                driver.find_element(By.TAG_NAME, "body").send_keys("1")
                wait(lambda done=done: int(driver.find_element(By.ID, "accepted").text) > done, 30,
                     "the answer accepted")  # fmt: skip
            wait(asked, 30, "a question")
            time.sleep(1)
            driver.save_screenshot(str(args.out / "console-annotate.png"))
        finally:
            driver.quit()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
    print(f"screenshots in {args.out}")


if __name__ == "__main__":
    main()
