"""Our runs under BOOM's protocol and ours, beside BOOM's published numbers.

One row per model, task, test set and metric: the mean ± sd over seeds of our runs under
`protocol=boom` and under `protocol=default`, BOOM's value, and where BOOM published its
seed spread (Table 6's R² sd on the ten BOOM tasks, Table 9's RMSE sd on Lipophilicity)
how many of BOOM's standard deviations ours lies from it (`z`) and whether that is within
the band (|z| ≤ 2). Table 7's RMSEs carry no spread, so RMSE rows of those tasks say so
instead of guessing one. R² is BOOM's: the squared Pearson correlation (binned over the
two OOD tails), as in the leaderboard (the coefficient of determination is `id.r2`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from oodmol.report.boom_reference import boom_paper

PROTOCOLS = ("boom", "default")
WITHIN_SDS = 2.0
# (set, metric) -> our metrics.json column. BOOM's R² is the squared Pearson correlation
# (`oodmol.metrics.regression.pearson_r2`), binned on the OOD set
METRIC_COLUMNS = {
    ("ID", "rmse"): "id.rmse",
    ("OOD", "rmse"): "ood.rmse",
    ("ID", "r2"): "id.pearson_r2",
    ("OOD", "r2"): "ood.binned_pearson_r2",
}


@dataclass(frozen=True)
class PaperTables:
    """BOOM's published values, long format: model (our name), set, task, metric, value,
    sd (NaN where the paper gives no spread)."""

    values: pd.DataFrame

    @classmethod
    def shipped(cls) -> PaperTables:
        """Tables 7, 5, 6 and 9 from the package's copy of the paper (`boom_paper`)."""
        tables = boom_paper().tables
        keys = ["model", "set", "task"]
        rmse = tables["table7"].rename(columns={"rmse": "value"}).assign(sd=np.nan)
        lipo = tables["table9"].rename(columns={"rmse": "value", "rmse_std": "sd"})
        r2 = tables["table5"].rename(columns={"r2": "value"})
        r2 = r2.merge(tables["table6"][[*keys, "r2_std"]], on=keys, how="left")
        r2 = r2.rename(columns={"r2_std": "sd"})
        columns = [*keys, "metric", "value", "sd"]
        # Table 9 repeats Lipophilicity with its spread: it wins over a Table 7 row
        values = pd.concat(
            [
                lipo.assign(metric="rmse")[columns],
                rmse.assign(metric="rmse")[columns],
                r2.assign(metric="r2")[columns],
            ],
            ignore_index=True,
        )
        return cls(values.drop_duplicates([*keys, "metric"], keep="first"))

    def lookup(self, model: str, set_name: str, task: str, metric: str) -> tuple[float, float]:
        """(value, sd), NaN where the paper has none."""
        rows = self.values[
            (self.values["model"] == model)
            & (self.values["set"] == set_name)
            & (self.values["task"] == task)
            & (self.values["metric"] == metric)
        ]
        if rows.empty:
            return np.nan, np.nan
        return float(rows["value"].iloc[0]), float(rows["sd"].iloc[0])


def within_spread(ours: float, paper: float, paper_sd: float) -> tuple[float, bool | None]:
    """(z, within): our mean's distance from BOOM's in BOOM's seed sds, and whether it is
    at most `WITHIN_SDS`; (NaN, None) where either value or the spread is unknown."""
    if not all(np.isfinite([ours, paper, paper_sd])) or paper_sd <= 0:
        return np.nan, None
    z = (ours - paper) / paper_sd
    return float(z), bool(abs(z) <= WITHIN_SDS)


def reproduction_table(runs: pd.DataFrame, paper: PaperTables) -> pd.DataFrame:
    """The long table from matched runs (columns `model_name`, `task`, `protocol`, `seed`
    and the metric columns): one row per model, task, set and metric."""
    rows = []
    for (model, task), group in runs.groupby(["model_name", "task"], sort=True):
        for (set_name, metric), column in METRIC_COLUMNS.items():
            row = {"model": model, "task": task, "set": set_name, "metric": metric}
            for protocol in PROTOCOLS:
                values = group.loc[group["protocol"] == protocol, column].dropna()
                row[f"{protocol}_mean"] = float(values.mean()) if len(values) else np.nan
                row[f"{protocol}_sd"] = float(values.std(ddof=1)) if len(values) > 1 else np.nan
                row[f"{protocol}_n"] = len(values)
            row["paper"], row["paper_sd"] = paper.lookup(model, set_name, task, metric)
            for protocol in PROTOCOLS:
                row[f"{protocol}_z"], row[f"{protocol}_within"] = within_spread(
                    row[f"{protocol}_mean"], row["paper"], row["paper_sd"]
                )
            rows.append(row)
    return pd.DataFrame(rows)


def _mean_sd(mean: float, sd: float, n: int) -> str:
    if not n:
        return "—"
    spread = f" ± {sd:.3g}" if np.isfinite(sd) else ""
    return f"{mean:.4g}{spread} ({n})"


def _verdict(z: float, within: bool | None) -> str:
    if within is None:
        return "—"
    return f"{'yes' if within else 'no'} ({z:+.1f})"


def to_markdown(table: pd.DataFrame) -> str:
    """The table as Markdown: ours under each protocol as mean ± sd (seeds), BOOM's value
    ± its seed sd, and for each protocol whether ours is within BOOM's spread (z)."""
    header = (
        "| model | task | set | metric | ours, protocol=boom | ours, protocol=default "
        "| BOOM (paper) | within BOOM's ±2 sd: boom | within: default |"
    )
    lines = [header, "|" + "---|" * 9]
    for row in table.itertuples(index=False):
        paper = "—" if not np.isfinite(row.paper) else f"{row.paper:.4g}"
        if np.isfinite(row.paper) and np.isfinite(row.paper_sd):
            paper += f" ± {row.paper_sd:.3g}"
        elif np.isfinite(row.paper):
            paper += " (no sd published)"
        metric = {"rmse": "RMSE", "r2": "R² (Pearson²)" if row.set == "ID" else "binned R²"}
        lines.append(
            f"| {row.model} | {row.task} | {row.set} | {metric[row.metric]} "
            f"| {_mean_sd(row.boom_mean, row.boom_sd, row.boom_n)} "
            f"| {_mean_sd(row.default_mean, row.default_sd, row.default_n)} "
            f"| {paper} | {_verdict(row.boom_z, row.boom_within)} "
            f"| {_verdict(row.default_z, row.default_within)} |"
        )
    return "\n".join(lines) + "\n"
