"""The live report page in a real browser (Debian's chromium, driven by Selenium)."""

from __future__ import annotations

import shutil
import tempfile

import pytest

from tests.service.test_serve import Server, tuned  # noqa: F401  (the module's fixture)

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture
def browser():
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("no chromium and chromedriver here (scripts/setup.sh installs Debian's)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="arbiter-chromium-")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.slow
def test_the_page_shows_the_winners_the_jobs_and_every_figure(tuned, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    url, _ = tuned
    from arbiter.records import Queue
    from arbiter.region import load_spec

    Queue(url).submit(list(load_spec(tuned[1])), {"trials": 1}, "test")
    s = Server(url, "--token", "page-token-1")
    try:
        browser.get(s.base + "/")
        assert "token is required" in browser.page_source  # not without the token
        browser.get(s.base + "/?token=page-token-1")
        assert browser.title == "Arbiter latency report"
        tables = browser.find_elements(By.TAG_NAME, "table")
        winners = [t for t in tables if t.get_attribute("id") != "jobs"][0]
        text = winners.text
        assert "small" in text and "wide" in text and "fake_tiny" in text
        jobs = browser.find_element(By.ID, "jobs").text
        assert "queued" in jobs and "0/2" in jobs
        images = browser.find_elements(By.TAG_NAME, "img")
        assert len(images) == 5
        for img in images:  # every figure loaded and drawn
            assert browser.execute_script(
                "return arguments[0].complete && arguments[0].naturalWidth > 100", img), \
                img.get_attribute("src")
    finally:
        assert "Traceback" not in s.stop()
