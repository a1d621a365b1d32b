"""The documentation site: `mkdocs build --strict` (every broken link or anchor, every
docstring that does not render, is an error), every package of src/oodmol with its
reference page, the README's links into docs/ landing on pages and headings that exist,
and the built site in headless Chromium, served on localhost: the home page, the main
sections of the navigation, a page of each section and the search, without a JavaScript
error. And the project's own text speaks of the product, not of its history."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from paths import REPO

ROOT = REPO
DOCS = ROOT / "docs"
PACKAGES = sorted(p.parent.name for p in (ROOT / "src" / "oodmol").glob("*/__init__.py"))
MODULES = sorted(p.stem for p in (ROOT / "src" / "oodmol").glob("*.py") if p.stem != "__init__")
SECTIONS = ("User guide", "Extending", "Reference", "Benchmarks and results")
# a page of each section, and a word its first heading holds
SECTION_PAGES = {
    "User guide": ("guide/running/", "Running"),
    "Extending": ("extending/model/", "Adding a model"),
    "Reference": ("reference/benchmark/", "oodmol.benchmark"),
    "Benchmarks and results": ("benchmarks/results/", "Results"),
}


def nav() -> list:
    """mkdocs.yml's navigation (its other keys need MkDocs' own YAML tags, read apart)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return yaml.safe_load(text[text.index("\nnav:") :])["nav"]


def nav_pages(entries: list) -> Iterator[str]:
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from nav_pages(value)
        else:
            yield value


def built_page(site: Path, page: str) -> Path:
    """The HTML file the Markdown source `page` (relative to docs/) is built into."""
    stem = page.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        return site / stem.removesuffix("index") / "index.html"
    return site / stem / "index.html"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    assert "WARNING" not in result.stderr, result.stderr
    return folder


def test_the_site_builds_strict_with_every_page_of_the_navigation(site: Path) -> None:
    pages = list(nav_pages(nav()))
    assert [next(iter(entry)) for entry in nav()] == ["Home", *SECTIONS]
    for page in pages:
        assert (DOCS / page).is_file(), f"mkdocs.yml names {page}, which does not exist"
        assert built_page(site, page).is_file(), f"{page} was not built"
    written = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert written == set(pages), "every page under docs/ is in the navigation, once"


def test_every_package_has_a_reference_page() -> None:
    pages = set(nav_pages(nav()))
    for package in PACKAGES:
        page = DOCS / "reference" / f"{package}.md"
        assert page.is_file(), f"src/oodmol/{package} has no docs/reference/{package}.md"
        assert f"::: oodmol.{package}\n" in page.read_text(encoding="utf-8")
        assert f"reference/{package}.md" in pages
    modules = (DOCS / "reference" / "modules.md").read_text(encoding="utf-8")
    assert set(re.findall(r"^::: oodmol\.(\w+)$", modules, re.MULTILINE)) == set(MODULES)


def test_the_reference_renders_the_code(site: Path) -> None:
    page = built_page(site, "reference/benchmark.md").read_text(encoding="utf-8")
    for name in ("run", "load", "tasks", "evaluate", "BenchmarkTask", "BenchmarkTask.evaluate"):
        assert f'id="oodmol.benchmark.{name}"' in page, name
    # a docstring's examples are code, not a paragraph whose brackets read as links
    assert '<span class="doc-section-title">Examples:</span>' in page
    assert '<span class="gp">&gt;&gt;&gt; </span>' in page


_MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readme_links_into_the_docs_land_on_pages_and_headings(site: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in _MARKDOWN_LINK.findall(readme) if not urlparse(t).scheme]
    assert any(t.startswith("docs/") for t in targets)
    for target in targets:
        path, _, anchor = unquote(target).partition("#")
        assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor:
            page = built_page(site, str(Path(path).relative_to("docs")))
            assert f'id="{anchor}"' in page.read_text(encoding="utf-8"), target


def test_the_readme_keeps_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^make train +# ", readme, re.MULTILINE)
    assert re.search(r"^make test +# ", readme, re.MULTILINE)
    assert "make docs" in readme
    for package in PACKAGES:
        assert f"`src/oodmol/{package}`" in readme, f"README's map lacks src/oodmol/{package}"


# ------------------------------------------------- the project's words are about the product

# Where the project describes itself. Its tests are left out: pytest's own
# `scope="session"` is everywhere there, and this file names the words it looks for.
OWN_TEXT = ("README.md", "mkdocs.yml", "Makefile", ".ci/run", "environment.yaml")
OWN_FOLDERS = {"docs": "*.md", "src": "*.py", "configs": "*.yaml", "bench": "*.py"}
HISTORY = re.compile(
    r"\bissues?\s*#?\d+"  # "issue 15", "issue #17"
    r"|\(#\d+\)"  # "(#21)"
    r"|\bsessions?\b"  # "this session's faster forwards", "earlier sessions"
    r"|\bmain's code\b"
    r"|\bthe issue that\b",
    re.IGNORECASE,
)
# words that match the pattern and are about something else
ALLOWED = (re.compile(r"\b(?:requests|aiohttp)\.(?:Client)?Session\b"),)


def own_text_files() -> Iterator[Path]:
    for name in OWN_TEXT:
        yield ROOT / name
    for folder, pattern in OWN_FOLDERS.items():
        yield from sorted((ROOT / folder).rglob(pattern))
    yield from sorted((ROOT / "scripts").rglob("*.sh"))
    yield from sorted((ROOT / "scripts").rglob("*.py"))


def history_words(text: str) -> list[str]:
    for allowed in ALLOWED:
        text = allowed.sub("", text)
    return [m.group(0) for m in HISTORY.finditer(text)]


def test_the_projects_text_speaks_of_the_product_not_its_history() -> None:
    found = []
    for path in own_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if words := history_words(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {words} in {line.strip()!r}")
    assert not found, "words about the project's history:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line, words",
    [
        ("GotenNet (issue 17) now computes", ["issue 17"]),
        ("Honest OOD model selection (issue #15, item 4).", ["issue #15"]),
        ("# the OOD-trajectory diagnostic (#21)", ["(#21)"]),
        ("measured after this session's faster forwards", ["session"]),
        ("as run in earlier sessions", ["sessions"]),
        ("before and after (main's code and this)", ["main's code"]),
        ("as the issue that asked for this table allows", ["the issue that"]),
        ("an HTTP session = requests.Session()", ["session"]),
        ("client = requests.Session()", []),
        ("issues a warning; the 5 issues of the format", []),
        ("color: #222; a 100 % match", []),
    ],
)
def test_the_history_pattern(line: str, words: list[str]) -> None:
    assert history_words(line) == words


# ------------------------------------------------------------------ in a real browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:
        pass


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The built site on localhost, as a static server serves it."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def browser(tmp_path: Path):
    if not (CHROMIUM and DRIVER):
        pytest.skip(
            "no headless browser: install Chromium and its driver "
            "(Debian/Ubuntu: apt-get install chromium chromium-driver)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1400,1000",  # wide enough for the navigation's tabs
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _errors(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_the_site_works_in_headless_chromium(served: str, browser, site: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(served)
    assert browser.title == "oodmol"
    assert not _errors(browser), _errors(browser)
    tabs = [t.text.strip() for t in browser.find_elements(By.CSS_SELECTOR, ".md-tabs__link")]
    assert tabs == ["Home", *SECTIONS], tabs
    heading = browser.find_element(By.CSS_SELECTOR, "article h1").text
    assert heading.startswith("oodmol")

    for section, (path, words) in SECTION_PAGES.items():
        browser.get(served + path)
        assert not _errors(browser), f"{path}: {_errors(browser)}"
        assert browser.title.endswith(" - oodmol"), browser.title
        assert words in browser.find_element(By.CSS_SELECTOR, "article h1").text, path
        active = browser.find_element(By.CSS_SELECTOR, ".md-tabs__item--active").text.strip()
        assert active == section, (path, active)
        links = browser.find_elements(By.CSS_SELECTOR, "article a[href]")
        for link in links:
            href = urlparse(link.get_attribute("href"))
            if href.netloc == urlparse(served).netloc:
                target = site / unquote(href.path).lstrip("/")
                assert target.is_file() or (target / "index.html").is_file(), (path, href)

    # the search runs in a web worker over search/search_index.json
    browser.get(served)
    browser.find_element(By.CSS_SELECTOR, "label.md-search__icon, .md-search__input").click()
    box = WebDriverWait(browser, 10).until(
        expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, ".md-search__input"))
    )
    box.send_keys("reproduce")
    results = WebDriverWait(browser, 20).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item")
    )
    assert results
    assert not _errors(browser), _errors(browser)
