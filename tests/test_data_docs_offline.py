"""The Great Expectations Data Docs of a release work with no network: every script and stylesheet
the pages load is shipped in the release (validation/data_docs/static/vendor, from
src/dpngram/release/data_docs_assets), and in a browser that may load nothing but files the index
lists every validation of the run and the pages are styled (Bootstrap, Font Awesome).

The release comes from a small real run (vocabulary and k-grams only, no model), so the pages are
the ones GX writes, rewritten by dpngram.release.data_docs.make_offline.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dpngram.config import RunConfig
from dpngram.orchestration.plan import run_release
from dpngram.release.data_docs import CDN_ASSETS, remote_resources

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    from dpngram.text.sample import write_sample

    base = tmp_path_factory.mktemp("offline-docs")
    sample = write_sample(base / "sample", n_users=300, seed=5, public_sentences=200)
    config = RunConfig.build(
        input=str(sample["users"]),
        out=str(base / "out"),
        warehouse=str(base / "wh.duckdb"),
        max_n=2,
        stage_budget={"dpne": 1.0},
        lm_route="off",
        delta=1e-5,
        run_id="offline-docs",
    )
    return Path(run_release(config)["release"])


def _pages(release: Path) -> list[Path]:
    return sorted((release / "validation" / "data_docs").rglob("*.html"))


def test_no_page_loads_a_script_or_stylesheet_from_the_network(release):
    pages = _pages(release)
    assert len(pages) > 3  # index, validation results, expectation suites
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert remote_resources(html) == [], page
        assert not any(url in html for url in CDN_ASSETS), page
        # every shipped script/stylesheet a page names exists at the relative path it uses
        shipped = [t for t in re.findall(r"""(?:src|href)=["']([^"'#?]+)""", html) if "static/vendor/" in t]
        assert len(shipped) >= 10, page
        for target in shipped:
            assert (page.parent / target).resolve().is_file(), (page.name, target)
    vendor = release / "validation" / "data_docs" / "static" / "vendor"
    assert (vendor / "NOTICE.md").is_file() and (vendor / "bootstrap" / "LICENSE").is_file()


def _offline_page(browser, url: str):
    """A page in a browser context that may load file:// URLs only; records any other request."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    attempted: list[str] = []

    def only_files(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            attempted.append(route.request.url)
            route.abort()

    context.route("**/*", only_files)
    page = context.new_page()
    failed: list[str] = []
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.goto(url)
    page.wait_for_load_state("load")
    page.wait_for_timeout(500)
    return context, page, attempted, failed


@pytest.mark.browser
def test_offline_index_lists_every_validation_and_pages_are_styled(release, browser, tmp_path):
    docs = release / "validation" / "data_docs"
    suites = json.loads((release / "validation" / "results.json").read_text())["suites"]
    context, page, attempted, failed = _offline_page(browser, (docs / "index.html").as_uri())
    try:
        # the validation results table is drawn by bootstrap-table (a shipped script): one row per
        # validation of the run
        table = page.locator("table.ge-index-page-validation-results-table")
        assert table.count() == 1  # bootstrap-table turned GX's data into this table
        rows = table.locator("tbody tr")
        assert rows.count() == len(suites)
        shown = " ".join(rows.all_inner_texts())
        for suite in suites:
            assert suite["suite"] in shown, suite["suite"]
        # Bootstrap's stylesheet applies (its font stack) and Font Awesome's icon font is loaded
        assert "-apple-system" in page.evaluate("getComputedStyle(document.body).fontFamily")
        loaded = page.evaluate(
            "document.fonts.ready.then(() => [...document.fonts]"
            ".filter(f => f.family.includes('Font Awesome') && f.status === 'loaded').length)"
        )
        assert loaded >= 1
        page.screenshot(path=str(tmp_path / "data_docs_index.png"))
        first = rows.locator("a").first.get_attribute("href")
        assert attempted == [] and failed == [], (attempted, failed)
    finally:
        context.close()

    # a validation result page: Bootstrap cards with their borders, no request beyond the files
    context, page, attempted, failed = _offline_page(browser, (docs / first).as_uri())
    try:
        card = page.locator(".card").first
        assert card.count() == 1
        assert card.evaluate("e => getComputedStyle(e).borderTopStyle") == "solid"
        assert attempted == [] and failed == [], (attempted, failed)
    finally:
        context.close()
