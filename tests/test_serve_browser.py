"""The web page end to end in headless Chromium (Debian's `chromium`, driven by Playwright without its own browser
download): ask a LitQA2 dev question, watch the stages, open a citation and see its evidence highlighted in context
and its section marked in the paper's ToC; then a plain search. Saves a screenshot as a build artifact.

The answer comes from the real pipeline with the tiny packaged model over the two-PDF corpus (serve_support's
TINY_PIPELINE, under a minute); set STRATA_SCREENSHOT_HOME to a store home holding the LitQA2 PDFs to answer with the
default settings and model instead (minutes on a CPU; STRATA_SCREENSHOT_TIMEOUT_S raises the wait).

No chromium or no playwright is a failure, not a skip: `make browser-deps` (which .ci/run runs) installs chromium.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from serve_support import MC_OPTIONS, MC_QUESTION, TINY_PIPELINE, build_corpus, corpus_settings

from strata.config import Settings
from strata.serve.app import background_server, create_app

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "benchmarks" / "results" / "screenshots"
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
PIPELINE_STAGES = ["retrieve", "read", "synthesize", "validate"]
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"]
NO_BROWSER = "install Debian's chromium with `make browser-deps` (which .ci/run runs) and `make install` for playwright"


@pytest.fixture(scope="module")
def page_url(tmp_path_factory, shared_data: Path):
    real_home = os.environ.get("STRATA_SCREENSHOT_HOME")
    if real_home:
        app = create_app(Settings.load(overrides={"store.home": real_home}))
    else:
        app = create_app(corpus_settings(build_corpus(tmp_path_factory.getbasetemp(), shared_data), **TINY_PIPELINE))
    with background_server(app) as url:
        yield url, "ask-pipeline.png" if real_home else "ask.png"


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail(f"no chromium binary on PATH (chromium, chromium-browser, google-chrome): {NO_BROWSER}")
    try:
        from playwright import sync_api
    except ImportError as error:
        pytest.fail(f"the playwright Python package cannot be imported ({error}): {NO_BROWSER}")
    with sync_api.sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        except sync_api.Error as error:
            pytest.fail(f"{CHROMIUM} did not start under playwright ({error}): {NO_BROWSER}")
        yield browser
        browser.close()


def test_ask_then_open_a_citation_and_see_its_evidence_highlighted(browser, page_url) -> None:
    url, screenshot = page_url
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    page.wait_for_function("document.getElementById('corpus').textContent.includes('papers')")

    page.fill("#question", MC_QUESTION)
    page.fill("#options", "\n".join(MC_OPTIONS))
    page.click("#ask-button")
    answer_timeout_s = float(os.environ.get("STRATA_SCREENSHOT_TIMEOUT_S", 180))
    page.wait_for_selector("#answer:not([hidden]), #ask-error:not([hidden])", timeout=answer_timeout_s * 1000)
    assert page.locator("#ask-error").is_hidden(), page.inner_text("#ask-error")
    stages = page.locator("#stages li").evaluate_all("items => items.map(item => [item.id, item.className])")
    shown = [stage_id.removeprefix("stage-") for stage_id, _ in stages]
    assert [stage for stage in shown if stage in PIPELINE_STAGES] == PIPELINE_STAGES, stages
    assert all(status == "done" for _, status in stages), stages
    assert page.evaluate("evidenceByNumber.size") >= 1, page.inner_text("#answer")

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
