"""The leaderboard as a static web site: index.html (BOOM's tables and figures over
all runs), one page per task and per model, and statistics.html (Section 4.7), linked
both ways; every figure as PNG and SVG under figures/, the comparison and statistics as
CSV beside the pages. Opens from disk: no server, nothing fetched."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from html import escape
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from oodmol.plotting import save_figure
from oodmol.report import html, web_tables
from oodmol.report.boom_reference import boom_paper, compare, paper_group_tests
from oodmol.report.figures.heatmaps import (
    normalized_rmse_heatmap,
    ood_heatmap,
    r2_heatmaps,
    similarity_heatmap,
)
from oodmol.report.figures.panels import (
    calibration_panels,
    id_ood_bars,
    id_ood_fit,
    parity_panels,
)
from oodmol.report.notebook import read_predictions
from oodmol.report.representation import representation
from oodmol.report.significance import (
    cluster_order,
    gaussian_process_fit,
    group_scores,
    id_ood_dependence,
    id_ood_points,
    kruskal_wallis,
    mann_whitney_pairs,
    mean_similarity,
    prediction_similarity,
)

INDEX, STATISTICS = "index.html", "statistics.html"


@dataclass
class Report:
    """What every page reads: runs, seed summary, comparison with the paper, provenance,
    test-set predictions, and where each page lives."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    comparison: pd.DataFrame
    trace: pd.DataFrame
    predictions: pd.DataFrame
    out: Path
    task_pages: dict[str, str]
    model_pages: dict[str, str]

    def task_href(self, benchmark: str) -> str:
        return self.task_pages[benchmark]

    def model_href(self, model: str) -> str:
        return self.model_pages[model]

    def href(self, kind: str, label: str) -> str:
        pages = self.task_pages if kind == "benchmark" else self.model_pages
        return html.link(pages[label], label)

    def figure(self, fig: Figure, name: str, caption: str) -> str:
        save_figure(fig, self.out / "figures" / name)
        return html.figure(f"figures/{name}", caption)

    def nav(self) -> list[tuple[str, str]]:
        return [(INDEX, "leaderboard"), (STATISTICS, "statistics")]


def _pages(labels: list[str], prefix: str) -> dict[str, str]:
    """label -> file name; two labels of one slug are refused (they would overwrite)."""
    pages: dict[str, str] = {}
    for label in labels:
        name = f"{prefix}-{html.slug(label)}.html"
        if name in pages.values():
            raise ValueError(f"two {prefix} labels share the page name {name}: rename one")
        pages[label] = name
    return pages


def _csv(frame: pd.DataFrame, path: Path) -> str:
    frame.to_csv(path, index=False)
    return html.link(path.name, path.name)


def _citation() -> str:
    paper = boom_paper()
    return (
        f'<p class="note">BOOM (paper): {escape(paper.citation)} '
        f"{html.link(paper.url, paper.url)}; code {html.link(paper.code, paper.code)}. "
        f"Each paper value is the mean of {paper.runs_per_value} runs, as printed. Known "
        f"defects of the printed tables: {escape(' '.join(d['defect'] for d in paper.defects))}</p>"
    )


def index_page(report: Report) -> str:
    """The leaderboard: BOOM's tables and figures over every run."""
    runs, comparison = report.runs, report.comparison
    names = dict(zip(runs["model"], runs["model_name"], strict=True))
    groups = web_tables.by_representation(report.summary, names)
    groups.to_csv(report.out / "representation.csv", index=False)
    body = [
        f"<p>{len(runs)} run(s) of {runs['model'].nunique()} leaderboard column(s) on "
        f"{runs['benchmark'].nunique()} task(s).</p>",
        "<h2>Tasks</h2><p>"
        + " · ".join(report.href("benchmark", b) for b in report.task_pages)
        + "</p>",
        "<h2>Models</h2><p>"
        + " · ".join(report.href("model", m) for m in report.model_pages)
        + "</p>",
        "<p>Tables as files: "
        + ", ".join(
            html.link(p.name, p.name)
            for p in sorted(report.out.glob("*.csv")) + sorted(report.out.glob("*.md"))
        )
        + "</p>",
        _citation(),
        report.figure(
            r2_heatmaps(comparison),
            "fig2_r2_heatmap",
            "Fig. 2: ID R² and OOD binned R², models × tasks",
        ),
        report.figure(
            id_ood_bars(report.summary),
            "fig3_id_ood_bars",
            "Fig. 3: ID against OOD score per task; dashed: mean over models",
        ),
        report.figure(
            normalized_rmse_heatmap(comparison),
            "fig8_rmse_over_mean",
            "Fig. 8: OOD RMSE over the task's mean over models",
        ),
        report.figure(
            ood_heatmap(report.summary), "heatmap", "OOD RMSE over the best model's, per task"
        ),
    ]
    for number, metric in (("Table 7", "rmse"), ("Table 5", "r2")):
        for set_name in ("ID", "OOD"):
            title = web_tables.METRICS[(metric, set_name)][0]
            table = web_tables.layout_table(
                comparison, report.trace, metric, set_name, report.model_href, report.task_href
            )
            body += [f"<h2>{number} layout: {escape(title)}</h2>", html.table(table)]
    body.append(f'<p class="note">{escape(web_tables.BEST_WORST)}</p>')
    for (metric, row), (title, _) in web_tables.EXTRAPOLATION.items():
        table = web_tables.measure_table(report.summary, metric, row, report.task_href)
        body += [f"<h2>Extrapolation: {escape(title)}</h2>", html.table(table)]
    body.append(
        "<p class=\"note\">OOD/ID: the OOD set's RMSE over the ID set's. Discovery (MatEx): "
        "screening the ID and OOD molecules by prediction, the share of the k ranked first "
        "that lie in the OOD set's tail, k that tail's size.</p>"
    )
    published = web_tables.paper_models_table(comparison)
    if published is not None:
        body += [
            "<h2>BOOM's published models without a run here (Tables 7 and 9)</h2>",
            html.table(published),
            '<p class="note">RMSE as printed in the paper (mean ± sd of 3 runs where it '
            "gives the sd), on this folder's tasks: the models these runs stand beside.</p>",
        ]
    body += [
        "<h2>Table 1 layout: RMSE averaged by representation</h2>",
        html.table(web_tables.representation_table(groups, report.task_href)),
        '<p class="note">Mean over full-run models of their seed-mean RMSE. BOOM\'s SMILES '
        "group includes the descriptor models (RF, MLP); ours does not.</p>",
    ]
    lipophilicity = comparison[comparison["task"] == "lipophilicity"]
    if not lipophilicity.empty:
        body += [
            "<h2>Table 9 layout: Lipophilicity</h2>",
            html.table(
                web_tables.entity_table(lipophilicity, report.trace, "model", report.model_href)
            ),
        ]
    body.append(
        "<h2>Provenance</h2>" + html.table(web_tables.provenance_table(report.trace, report.href))
    )
    return html.page("oodmol leaderboard", report.nav(), body)


def _predictions_figures(
    report: Report, part: pd.DataFrame, by: str, name: str, title: str
) -> list[str]:
    if part.empty:
        return ["<p>No predictions.csv beside these runs: no parity or calibration figure.</p>"]
    body = [
        report.figure(
            parity_panels(part, by, f"Parity: {title}"),
            f"parity_{name}",
            f"Parity plots (Appendix D): {title}",
        )
    ]
    if part["y_std"].notna().any():
        body.append(
            report.figure(
                calibration_panels(part, by, f"Calibration: {title}"),
                f"calibration_{name}",
                f"Calibration of σ: {title}",
            )
        )
    return body


def _similarity_figure(
    report: Report, similarity: pd.DataFrame, name: str, title: str, caption: str
) -> list[str]:
    """The models' similarity matrix as a heatmap in cluster order, where there are two
    models or more to compare."""
    if len(similarity) < 2:
        return []
    heatmap = similarity_heatmap(similarity, cluster_order(similarity), title)
    return [report.figure(heatmap, name, caption)]


def task_page(report: Report, benchmark: str) -> str:
    comparison = report.comparison[report.comparison["benchmark"] == benchmark]
    summary = report.summary[report.summary["benchmark"] == benchmark]
    name = html.slug(benchmark)
    body = [
        html.table(web_tables.entity_table(comparison, report.trace, "model", report.model_href)),
        f'<p class="note">{escape(web_tables.BEST_WORST)}</p>',
        report.figure(
            id_ood_bars(summary), f"bars_{name}", f"ID and OOD score of each model on {benchmark}"
        ),
    ]
    predictions = report.predictions[report.predictions["benchmark"] == benchmark]
    body += _predictions_figures(report, predictions, "model", name, benchmark)
    body += _similarity_figure(
        report,
        prediction_similarity(predictions),
        f"similarity_{name}",
        f"Spearman ρ of OOD predictions, {benchmark}",
        f"Model-model similarity of OOD predictions on {benchmark}",
    )
    trace = report.trace.loc[[benchmark]]
    body += [
        f"<h2>Runs</h2>{html.table(web_tables.provenance_table(trace, report.href))}",
        _citation(),
    ]
    return html.page(f"Task {benchmark}", report.nav(), body)


def model_page(report: Report, model: str) -> str:
    comparison = report.comparison[report.comparison["model"] == model]
    name = html.slug(model)
    group = representation(comparison["model_name"].iloc[0])
    body = [
        f"<p>Representation group: {escape(group)}.</p>",
        html.table(
            web_tables.entity_table(comparison, report.trace, "benchmark", report.task_href)
        ),
        f'<p class="note">{escape(web_tables.CELLS)}</p>',
    ]
    body += _predictions_figures(
        report,
        report.predictions[report.predictions["model"] == model],
        "benchmark",
        f"model_{name}",
        model,
    )
    trace = report.trace.xs(model, level="model", drop_level=False)
    body += [
        f"<h2>Runs</h2>{html.table(web_tables.provenance_table(trace, report.href))}",
        _citation(),
    ]
    return html.page(f"Model {model}", report.nav(), body)


def _frame_table(frame: pd.DataFrame) -> str:
    table = html.Table(list(frame.columns))
    for row in frame.itertuples(index=False):
        cells: list[html.Cell | str] = []
        for value in row:
            text = web_tables.number(value) if isinstance(value, float) else str(value)
            cells.append(html.Cell(text))
        table.add(cells)
    return html.table(table)


def statistics_page(report: Report) -> str:
    """Section 4.7: representation tests, ID-OOD dependence, similarity of predictions."""
    scores = group_scores(report.runs)
    paper = paper_group_tests()
    kw = kruskal_wallis(scores)
    paper_kw = paper[paper["test"] == "kruskal"].set_index("task")["p"]
    kw["p · BOOM (paper)"] = kw["benchmark"].map(paper_kw)
    mwu = mann_whitney_pairs(scores)
    paper_mwu = paper[paper["test"] == "mannwhitneyu"].set_index(["task", "better", "worse"])["p"]
    mwu["p · BOOM (paper)"] = [
        paper_mwu.get((b, g, w))
        for b, g, w in zip(mwu["benchmark"], mwu["better"], mwu["worse"], strict=True)
    ]
    points = id_ood_points(report.summary)
    dependence = id_ood_dependence(points)
    fit = (
        gaussian_process_fit(points["id"].to_numpy(), points["ood"].to_numpy())
        if len(points) >= 3
        else None
    )
    body = [
        "<p>Scores: OOD binned R² of each full run (model × seed); runs with a [flag] and "
        "models of unknown representation are left out. BOOM's Table 8 has N = 39 runs "
        "per task.</p>",
        "<h2>Kruskal–Wallis across representation groups</h2>",
        _frame_table(kw),
        _csv(kw, report.out / "kruskal_wallis.csv"),
        "<h2>One-sided Mann–Whitney U (Table 8): the first group scores higher</h2>",
        _frame_table(mwu),
        _csv(mwu, report.out / "mann_whitney.csv"),
        "<h2>Distance correlation of ID R² and OOD binned R² (seed means over models)</h2>",
        _frame_table(dependence),
        _csv(dependence, report.out / "id_ood_dependence.csv"),
        report.figure(
            id_ood_fit(points, fit),
            "fig11_id_ood_gp",
            "Fig. 11: OOD on ID score with a Gaussian-process fit and its 95 % band",
        ),
    ]
    if fit is not None:
        body.append(f'<p class="note">GP kernel after fitting: {escape(str(fit.kernel))}</p>')
    matrices = [prediction_similarity(part) for _, part in report.predictions.groupby("benchmark")]
    body += _similarity_figure(
        report,
        mean_similarity([m for m in matrices if len(m) >= 2]),
        "similarity_all",
        "Spearman ρ of OOD predictions, mean over tasks",
        "Model-model similarity of OOD predictions, clustered",
    )
    body += [
        "<h2>Per task</h2><p>"
        + " · ".join(report.href("benchmark", b) for b in report.task_pages)
        + "</p>",
        _citation(),
    ]
    return html.page("Statistics (BOOM Section 4.7)", report.nav(), body)


def build_site(runs: pd.DataFrame, summary: pd.DataFrame, out: Path) -> list[Path]:
    """Write every page, figure and CSV of the site into `out`; return the pages."""
    names = dict(zip(runs["model"], runs["model_name"], strict=True))
    comparison = compare(summary, runs)
    comparison["model_name"] = comparison["model"].map(names)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        predictions = read_predictions(runs)
    report = Report(
        runs=runs,
        summary=summary,
        comparison=comparison,
        trace=web_tables.provenance(runs),
        predictions=predictions,
        out=out,
        task_pages=_pages(sorted(runs["benchmark"].unique()), "task"),
        model_pages=_pages(sorted(runs["model"].unique()), "model"),
    )
    web_tables.paper_rows(comparison).to_csv(out / "paper_comparison.csv", index=False)
    pages = {STATISTICS: statistics_page(report)}
    pages.update({page: task_page(report, b) for b, page in report.task_pages.items()})
    pages.update({page: model_page(report, m) for m, page in report.model_pages.items()})
    pages[INDEX] = index_page(report)  # last: it lists the CSVs the others wrote
    for name, text in pages.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in pages]
