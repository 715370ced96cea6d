"""``snapkv serve``'s web page in a real headless Chromium (Debian's ``chromium``, driven by Playwright): upload the
example report, ask the quickstart question, see the answer stream in and the report, open the retained-token view.
Skipped where Chromium or Playwright is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_serve import served

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium (apt-get install chromium)")

REPORT = Path(__file__).resolve().parent.parent / "examples" / "annual_report.pdf"
QUESTION = "Who is the chief executive of Northwind Harbor Logistics?"


@pytest.fixture
def browser():
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield browser
        browser.close()


def test_upload_ask_read_the_report_and_open_the_retained_token_view(browser, tiny_model_path):
    with served(tiny_model_path, truncate="middle") as (url, context):
        page = browser.new_page(viewport={"width": 390, "height": 844})  # a phone's width
        page.goto(url)
        page.set_input_files("#file", str(REPORT))
        page.locator("#documents option").wait_for(state="attached")
        assert "annual_report.pdf" in page.inner_text("#documents")
        page.focus("#question")
        page.keyboard.type(QUESTION)
        page.keyboard.press("Enter")  # the keyboard asks
        page.wait_for_selector("#report-box[open] td", timeout=120_000)
        assert page.inner_text("#answer").strip()
        rows = dict(zip(page.locator("#report td:first-child").all_inner_texts(),
                        page.locator("#report td:last-child").all_inner_texts()))
        assert rows["model"] == context.runner.loaded.name and rows["prefix"].endswith("from prefill")
        assert page.inner_text("#status") == "Done"
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
        with page.context.expect_page() as opened:
            page.click("#view")
        view = opened.value
        view.wait_for_load_state()
        assert "snapkv inspect" in view.title() and QUESTION in view.content()
        assert view.locator("span").count() > 100  # the prompt's tokens, shaded by how much was kept
