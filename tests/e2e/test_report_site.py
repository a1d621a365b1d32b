"""The leaderboard web site end to end: `oodmol report` on a runs folder made here
(four models of three representation groups, two tasks, three seeds, the forest with σ,
a subset run and a partial external file) writes every page, table, figure and
statistic; headless Chromium then opens every page from disk."""

from __future__ import annotations

import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd
import pytest
from door_helpers import shared_doors
from report_helpers import SITE_MODELS, SITE_SEEDS, SITE_TASKS, write_site_runs
from scipy.stats import kruskal

from oodmol.report.boom_reference import boom_paper
from oodmol.report.significance import SCORE

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site")
    runs = write_site_runs(root / "runs")
    argv = ["-m", "oodmol.cli", "report", str(runs), "--out", str(root / "out")]
    result = shared_doors().run(argv, env=dict(os.environ), timeout=300)
    assert result.returncode == 0, result.shown()
    return root / "out"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"])
        if tag == "img" and values.get("src"):
            self.images.append(values["src"])


def _links(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _local(href: str) -> bool:
    return not urlparse(href).scheme


def test_every_page_exists_and_links_only_to_files_that_exist(site: Path) -> None:
    pages = sorted(p.name for p in site.glob("*.html"))
    expected = {"index.html", "statistics.html"}
    expected |= {f"task-{t}.html" for t in SITE_TASKS}
    expected |= {f"model-{m}.html" for m in SITE_MODELS}
    expected |= {"model-mlp_subset.html", "model-llm_external_partial.html"}
    assert set(pages) == expected
    linked_from_index = set(_links(site / "index.html").hrefs)
    assert expected - {"index.html"} <= linked_from_index
    for page in pages:
        links = _links(site / page)
        assert "index.html" in links.hrefs, f"{page} does not link back"
        for href in links.hrefs + links.images:
            if _local(href):
                assert (site / unquote(href)).is_file(), f"{page}: {href} is missing"
    task_links = set(_links(site / "task-csd10k_density.html").hrefs)
    assert {"model-rf.html", "model-llm_external_partial.html"} <= task_links
    assert "task-lipophilicity.html" in set(_links(site / "model-egnn.html").hrefs)


def test_every_figure_is_a_png_and_an_svg(site: Path) -> None:
    names = {p.stem for p in (site / "figures").glob("*.png")}
    assert names == {p.stem for p in (site / "figures").glob("*.svg")}
    expected = {"fig2_r2_heatmap", "fig3_id_ood_bars", "fig8_rmse_over_mean", "heatmap"}
    expected |= {"fig11_id_ood_gp", "similarity_all"}
    expected |= {f"{kind}_{t}" for kind in ("bars", "parity", "similarity") for t in SITE_TASKS}
    expected |= {f"parity_model_{m}" for m in SITE_MODELS}
    # σ only where runs have one: the forest, on both tasks
    expected |= {"calibration_model_rf", *(f"calibration_{t}" for t in SITE_TASKS)}
    assert expected <= names
    assert not any(
        n.startswith("calibration_model_") and n != "calibration_model_rf" for n in names
    )
    for png in (site / "figures").glob("*.png"):
        assert png.read_bytes()[:8] == PNG
    assert "<svg" in (site / "figures" / "fig2_r2_heatmap.svg").read_text()[:2000]


def test_tables_keep_markdown_csv_and_show_paper_rows_with_ratios(site: Path) -> None:
    for name in ("rmse.csv", "rmse.md", "r2.csv", "r2.md", "runs.csv", "representation.csv"):
        assert (site / name).is_file()
    index = (site / "index.html").read_text(encoding="utf-8")
    for title in ("Table 7 layout", "Table 5 layout", "Table 1 layout", "Table 9 layout"):
        assert title in index
    paper = boom_paper()
    assert paper.citation in index
    comparison = pd.read_csv(site / "paper_comparison.csv")
    rmse = pd.read_csv(site / "rmse.csv").set_index(["benchmark", "model", "set"])
    table7 = paper.tables["table7"].set_index(["model", "task", "set"])["rmse"]
    row = comparison.set_index(["benchmark", "model", "metric", "set"]).loc[
        ("csd10k_density", "egnn", "rmse", "OOD")
    ]
    assert row["paper_mean"] == table7[("egnn", "csd10k_density", "OOD")]
    assert row["ratio"] == pytest.approx(
        rmse.loc[("csd10k_density", "egnn", "OOD"), "mean"] / row["paper_mean"]
    )
    table9 = paper.tables["table9"].set_index(["model", "set"])
    lipo = comparison.set_index(["benchmark", "model", "metric", "set"]).loc[
        ("lipophilicity", "mlp", "rmse", "ID")
    ]
    assert (lipo["paper_mean"], lipo["paper_std"]) == tuple(
        table9.loc[("mlp", "ID"), ["rmse", "rmse_std"]]
    )
    # flagged columns never get a paper number: not the paper's experiment
    assert not comparison["model"].str.contains(r"\[").any()
    assert "egnn · BOOM (paper)" in index and "egnn · ours / paper" in index


def test_cells_trace_back_to_their_runs(site: Path) -> None:
    task = (site / "task-csd10k_density.html").read_text(encoding="utf-8")
    assert 'title="3 run(s); seeds 0, 1, 2; split csd10k_densi; flags: none"' in task
    assert "flags: subset" in task and "flags: external, partial" in task
    assert re.search(
        r"<td>1</td><td>none</td><td>csd10k_density-hash</td><td>external, partial</td>", task
    )


def test_statistics_agree_with_scipy_on_the_runs(site: Path) -> None:
    runs = pd.read_csv(site / "runs.csv")
    full = runs[~runs["model"].str.contains(r"\[")]
    groups = {"rf": "descriptors", "mlp": "descriptors", "chemprop": "graph", "egnn": "3D"}
    table = pd.read_csv(site / "kruskal_wallis.csv").set_index("benchmark")
    for task in SITE_TASKS:
        part = full[full["task"] == task]
        samples = [
            part.loc[part["model_name"].map(groups) == g, SCORE]
            for g in ("3D", "graph", "descriptors")
        ]
        assert table.loc[task, "p"] == pytest.approx(kruskal(*samples).pvalue)
        assert table.loc[task, "n"] == len(SITE_MODELS) * len(SITE_SEEDS)
    pairs = pd.read_csv(site / "mann_whitney.csv")
    assert len(pairs) == 3 * (len(SITE_TASKS) + 1)
    dependence = pd.read_csv(site / "id_ood_dependence.csv").set_index("benchmark")
    assert dependence.loc["all tasks", "n"] == len(SITE_MODELS) * len(SITE_TASKS)
    assert 0 < dependence.loc["all tasks", "p"] <= 1
    statistics = (site / "statistics.html").read_text(encoding="utf-8")
    assert "GP kernel after fitting" in statistics


# ------------------------------------------------------------ in a real browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if not (CHROMIUM and DRIVER):
        pytest.skip(
            "no headless browser: install Chromium and its driver "
            "(Debian/Ubuntu: apt-get install chromium chromium-driver)"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def test_every_page_renders_in_headless_chromium(site: Path) -> None:
    driver = _browser()
    screens = Path(os.environ.get("OODMOL_SCREENSHOTS", site / "screenshots"))
    screens.mkdir(parents=True, exist_ok=True)
    try:
        for page in sorted(site.glob("*.html")):
            driver.get(page.as_uri())
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, f"{page.name}: {errors}"
            assert driver.title, page.name
            for link in driver.find_elements("css selector", "a[href]"):
                href = link.get_attribute("href")
                if href.startswith("file://"):
                    assert Path(unquote(urlparse(href).path)).is_file(), f"{page.name}: {href}"
            images = driver.find_elements("tag name", "img")
            assert images, f"{page.name} shows no figure"
            for image in images:
                width = driver.execute_script(
                    "return arguments[0].complete && arguments[0].naturalWidth", image
                )
                assert width and width > 0, (
                    f"{page.name}: {image.get_attribute('src')} did not render"
                )
            if page.name in ("index.html", "task-csd10k_density.html"):
                height = driver.execute_script("return document.body.scrollHeight")
                driver.set_window_size(1400, min(int(height) + 100, 16000))
                assert driver.save_screenshot(str(screens / f"{page.stem}.png"))
                driver.set_window_size(1400, 1000)
    finally:
        driver.quit()
    assert (screens / "index.png").read_bytes()[:8] == PNG
