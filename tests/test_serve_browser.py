"""The web page end to end in headless Chromium (Debian's `chromium`, driven by Playwright without its own browser
download): ask a LitQA2 dev question, watch the stages, open a citation and see its evidence highlighted in context
and its section marked in the paper's ToC; then a plain search. Saves a screenshot as a build artifact.

By default the answer comes from the fake reader (real corpus, real search); set STRATA_SCREENSHOT_HOME to a store
home holding the LitQA2 PDFs to answer with the real pipeline instead (minutes on a CPU).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from serve_support import build_corpus, corpus_settings, fake_ask

from strata.config import Settings
from strata.serve.app import background_server, create_app

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "benchmarks" / "results" / "screenshots"
# LitQA2 dev question f7346ea0-5f1b-45e9-a1d6-493c754159c1, answered by one of the corpus's two PDFs.
QUESTION = ("Which of the following processes are impacted by the S118L mutation of the potassium channel Kir6.2 in "
            "humans?")
OPTIONS = ["membrane trafficking", "ATP sensitivity", "metabolic inhibition", "channel stimulation by MgADP"]
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary on PATH: install Debian's chromium (`make browser-deps`, which .ci/run runs)",
)


@pytest.fixture(scope="module")
def page_url(tmp_path_factory, shared_data: Path):
    real_home = os.environ.get("STRATA_SCREENSHOT_HOME")
    if real_home:
        app = create_app(Settings.load(overrides={"store.home": real_home}))
    else:
        app = create_app(corpus_settings(build_corpus(tmp_path_factory.getbasetemp(), shared_data)), ask_fn=fake_ask)
    with background_server(app) as url:
        yield url, "ask-pipeline.png" if real_home else "ask.png"


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright Python package is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def test_ask_then_open_a_citation_and_see_its_evidence_highlighted(page_url, browser) -> None:
    url, screenshot = page_url
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_function("document.getElementById('corpus').textContent.includes('papers')")

    page.fill("#question", QUESTION)
    page.fill("#options", "\n".join(OPTIONS))
    page.click("#ask-button")
    answer_timeout_s = float(os.environ.get("STRATA_SCREENSHOT_TIMEOUT_S", 60))
    page.wait_for_selector("#answer:not([hidden]), #ask-error:not([hidden])", timeout=answer_timeout_s * 1000)
    assert page.locator("#ask-error").is_hidden(), page.inner_text("#ask-error")
    assert page.locator("#stages li.done").count() >= 2

    citation = page.locator("#answer-text button.cite:not([disabled]), #claims button.cite:not([disabled])").first
    number = int(citation.get_attribute("data-number"))
    citation.click()
    page.wait_for_selector("#detail mark.evidence")
    evidence = page.evaluate(f"evidenceByNumber.get({number})")
    assert page.inner_text("#detail mark.evidence").split() == evidence["text"].split()
    assert page.inner_text("#detail-title").strip() == evidence["title"].strip()
    if evidence["quote"]:
        assert page.locator("#detail mark.evidence .quote").count() == 1
    if evidence["section_path"]:
        assert page.inner_text("#toc li.current > span").endswith(evidence["section_path"][-1])
    assert "active" in citation.get_attribute("class")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / screenshot), full_page=True)

    page.fill("#query", "Kir6.2 S118L membrane trafficking")
    page.click("#search-form button")
    page.wait_for_selector("#results li strong")
    page.locator("#results button.link").first.click()
    page.wait_for_function("document.querySelector('#detail mark.evidence').textContent.length > 0")
    assert errors == []
