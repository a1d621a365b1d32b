"""BenchML's figures asked of the OOD tail (`oodmol ablation benchml <runs> --out <dir>`):
which representation extrapolates with a simple regressor?

The runs are those of experiment=benchml, benchml_tanimoto and benchml_learning_curve
(models named `<representation>-<regressor>`, with the nested search's `fit` section in
their metrics.json), beside any random forest and MLP runs of the same folder (the
descriptor baselines). Seeds are averaged (the regressors are deterministic: one seed).

- `benchml-rmse`: per task, ID and OOD RMSE of every representation × regressor
  (split=ood, the full training set), as heatmaps; the table adds the search's choice
  (α, the length scale in median distances) and whether it lies at an end of its grid.
- `benchml-ratio`: per task and representation, OOD RMSE / ID RMSE of each regressor,
  and of the representation's best regressor (by OOD RMSE).
- `benchml-learning-curves`: per task and representation, RMSE against training size
  (split.subset runs), ID and OOD, each with its fitted power law RMSE = a·n^b; and
  `benchml-slopes`: every fitted OOD slope against its ID slope, the diagonal where OOD
  error falls at the rate ID error does.
- `benchml-similarity`: per task, how alike the representations are: the Pearson
  correlation of their OOD errors (y_pred − y_true, molecule by molecule) with the
  regressor given by `--similarity-regressor` (default krr_rbf).
- `benchml-answers.csv`: per task, the best representation × regressor out of
  distribution, the best of each representation, the random forest and the MLP (where
  the folder has them) and, given BOOM's published RMSEs (Tables 7 and 9), BOOM's best
  deep model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from oodmol.ablation.learning_curve import curve_statistics
from oodmol.ablation.runs import Run
from oodmol.errors import InputError
from oodmol.plotting import new_figure, write_outputs
from oodmol.predictions import read_predictions_file

FULL_SPLIT = "ood"
BASELINES = ("rf", "mlp")  # the descriptor baselines, where the folder has their runs
# uq methods whose predictions are the model's own (an ensemble's mean is another model's)
SINGLE_MODEL = ("none", "native")
SIMILARITY_REGRESSOR = "krr_rbf"
# BOOM's models that learn from RDKit descriptors (Table 7 labels them "SMILES")
BOOM_DESCRIPTOR_MODELS = ("Random Forest", "MLP")


def benchml_rows(runs: list[Run]) -> pd.DataFrame:
    """One row per BenchML or baseline run: task, split, representation, regressor,
    seed, subset (fraction, repeat or None), training size, ID and OOD RMSE, folder."""
    rows = []
    for run in runs:
        metrics = run.metrics
        model = metrics["model"]
        if "fit" in metrics and "-" in model:
            representation, regressor = model.split("-", 1)
        elif model in BASELINES and metrics.get("uq", {}).get("method", "none") in SINGLE_MODEL:
            representation, regressor = "descriptors", model
        else:
            continue
        data = metrics.get("data", {})
        sizes = data.get("sizes_used") or data.get("sizes") or {}
        subset = run.setting("split", "subset") if metrics["split"] != FULL_SPLIT else None
        rows.append(
            {
                "task": metrics["task"],
                "split": metrics["split"],
                "representation": representation,
                "regressor": regressor,
                "seed": metrics.get("seed"),
                "fraction": None if subset is None else float(subset[0]),
                "repeat": None if subset is None else int(subset[1]),
                "n_train": sizes.get("train"),
                "id_rmse": metrics["id"]["rmse"],
                "ood_rmse": metrics["ood"]["rmse"],
                "flags": ",".join(metrics.get("flags") or []),
                **_chosen(metrics.get("fit", {}).get("search") or {}),
                "folder": str(run.folder),
            }
        )
    if not rows:
        raise InputError(
            "no complete run of a BenchML regressor (experiment=benchml: models named "
            "<representation>-<regressor>) or of the descriptor baselines"
        )
    return pd.DataFrame(rows)


def _chosen(search: dict) -> dict:
    """The search's choice: α, the length scale as a multiple of the median distance,
    and which of them lies at an end of its grid (the optimum may lie beyond)."""
    alphas, grid = search.get("alphas") or [], search.get("kernel_grid") or [None]
    alpha, length_scale = search.get("alpha"), search.get("length_scale")
    scale = search.get("distance_scale") or 1.0
    edges = []
    if alpha is not None and len(alphas) > 1 and alpha in (min(alphas), max(alphas)):
        edges.append("alpha")
    scales = [g for g in grid if g is not None]
    if length_scale is not None and len(scales) > 1 and length_scale in (min(scales), max(scales)):
        edges.append("length scale")
    return {
        "alpha": alpha,
        "length_scale": None if length_scale is None else length_scale / scale,
        "grid_edge": ",".join(edges),
    }


def rmse_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task, representation and regressor on the full training set (split=ood): the
    mean ID and OOD RMSE over seeds, the number of seeds, and OOD/ID."""
    full = rows[rows["split"] == FULL_SPLIT]
    if full.empty:
        raise InputError("no run on the full training set (split=ood)")
    table = (
        full.groupby(["task", "representation", "regressor"], sort=True)
        .agg(
            id_rmse=("id_rmse", "mean"),
            ood_rmse=("ood_rmse", "mean"),
            seeds=("seed", "nunique"),
            flags=("flags", "first"),
            alpha=("alpha", "first"),
            length_scale=("length_scale", "first"),
            grid_edge=("grid_edge", "first"),
        )
        .reset_index()
    )
    table["ratio"] = table["ood_rmse"] / table["id_rmse"]
    order = [
        (task, _representation_order(r), _regressor_order(g))
        for task, r, g in zip(
            table["task"], table["representation"], table["regressor"], strict=True
        )
    ]
    table = table.iloc[sorted(range(len(table)), key=order.__getitem__)]
    return table.reset_index(drop=True)  # ties (a GP's mean is its KRR's) go to the simpler


def rmse_figure(table: pd.DataFrame) -> Figure:
    """Per task (row) two heatmaps, ID and OOD RMSE, representation × regressor, each
    with its values; a logarithmic colour scale per panel (darker: larger error)."""
    tasks = sorted(table["task"].unique())
    figure = new_figure()
    regressors = sorted(table["regressor"].unique(), key=_regressor_order)
    representations = sorted(table["representation"].unique(), key=_representation_order)
    width = max(8.0, 1.3 * len(regressors))
    figure.set_size_inches(width, 0.45 * len(representations) * len(tasks) + 1.2 * len(tasks))
    axes = figure.subplots(len(tasks), 2, squeeze=False)
    for row, task in enumerate(tasks):
        part = table[table["task"] == task]
        grids = {
            name: part.pivot(index="representation", columns="regressor", values=column)
            .reindex(index=representations, columns=regressors)
            .to_numpy(dtype=float)
            for name, column in (("ID", "id_rmse"), ("OOD", "ood_rmse"))
        }
        for column, (name, grid) in enumerate(grids.items()):
            ax = axes[row, column]
            finite = grid[np.isfinite(grid) & (grid > 0)]
            norm = LogNorm(finite.min(), finite.max()) if finite.size else None
            ax.imshow(grid, cmap="viridis_r", norm=norm, aspect="auto")
            for (i, j), value in np.ndenumerate(grid):
                if np.isfinite(value):
                    dark = norm is not None and value > 0 and norm(value) > 0.55
                    colour = "white" if dark else "black"
                    ax.text(
                        j, i, f"{value:.3g}", ha="center", va="center", fontsize=6, color=colour
                    )
            ax.set_xticks(range(len(regressors)), regressors, rotation=45, ha="right", fontsize=7)
            ax.set_yticks(range(len(representations)), representations, fontsize=7)
            ax.set_title(f"{task}: {name} RMSE", fontsize=9)
    figure.tight_layout()
    return figure


def ratio_figure(table: pd.DataFrame) -> Figure:
    """Per task, OOD RMSE / ID RMSE by representation: a dot per regressor, a bar for the
    representation's best regressor out of distribution."""
    tasks = sorted(table["task"].unique())
    figure = new_figure()
    figure.set_size_inches(7.0, 2.6 * len(tasks))
    axes = figure.subplots(len(tasks), 1, squeeze=False)[:, 0]
    best = best_per_representation(table)
    for ax, task in zip(axes, tasks, strict=True):
        part = table[table["task"] == task]
        order = sorted(part["representation"].unique(), key=_representation_order)
        position = {name: i for i, name in enumerate(order)}
        chosen = best[best["task"] == task]
        ax.bar(
            [position[r] for r in chosen["representation"]],
            chosen["ratio"],
            color="0.8",
            label="best regressor (OOD RMSE)",
        )
        for k, (regressor, group) in enumerate(part.groupby("regressor", sort=True)):
            ax.plot(
                [position[r] for r in group["representation"]],
                group["ratio"],
                "o",
                ms=3,
                color=f"C{k}",
                label=regressor,
            )
        ax.set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("OOD / ID RMSE")
        ax.set_title(task, fontsize=9)
        ax.axhline(1.0, color="0.5", lw=0.5)
    axes[0].legend(fontsize=6, ncol=3)
    figure.tight_layout()
    return figure


def best_per_representation(table: pd.DataFrame) -> pd.DataFrame:
    """Per task and representation, its regressor of least OOD RMSE."""
    index = table.groupby(["task", "representation"])["ood_rmse"].idxmin()
    return table.loc[index].reset_index(drop=True)


def learning_curve_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task, representation, regressor, set and fraction: training size, repeats, mean
    and sd RMSE; and the set's power law RMSE = a·n^b (`slope` b, `prefactor` a) fitted
    over every run, as `oodmol.ablation.learning_curve`."""
    curves = rows[rows["fraction"].notna()]
    if curves.empty:
        return pd.DataFrame()
    out = []
    for (task, representation, regressor), group in curves.groupby(
        ["task", "representation", "regressor"], sort=True
    ):
        if group["n_train"].nunique() < 2:
            continue
        keys = {"task": task, "representation": representation, "regressor": regressor}
        out += curve_statistics(group, keys)
    return pd.DataFrame(out)


def learning_curve_figure(table: pd.DataFrame, task: str) -> Figure:
    """One panel per representation: RMSE against training size, log–log, ID dashed and
    OOD solid, a colour per regressor, the fitted slopes in the legend."""
    part = table[table["task"] == task]
    representations = sorted(part["representation"].unique(), key=_representation_order)
    columns = min(5, len(representations))
    rows = -(-len(representations) // columns)
    figure = new_figure()
    figure.set_size_inches(3.0 * columns, 2.6 * rows)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    regressors = sorted(part["regressor"].unique(), key=_regressor_order)
    colours = {name: f"C{i}" for i, name in enumerate(regressors)}
    for ax, representation in zip(axes, representations, strict=False):
        panel = part[part["representation"] == representation]
        for (regressor, label), group in panel.groupby(["regressor", "set"], sort=True):
            n = group["n_train"].to_numpy(dtype=float)
            colour = colours[regressor]
            ax.errorbar(
                n,
                group["rmse_mean"],
                yerr=group["rmse_sd"].fillna(0.0),
                fmt="o",
                ms=2,
                color=colour,
            )
            grid = np.geomspace(n.min(), n.max(), 30)
            a, b = group["prefactor"].iloc[0], group["slope"].iloc[0]
            style = "--" if label == "ID" else "-"
            ax.plot(
                grid, a * grid**b, style, color=colour, lw=1, label=f"{regressor} {label} {b:+.2f}"
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(NullFormatter())
        ax.set_title(representation, fontsize=8)
        ax.tick_params(labelsize=6, which="both")
        ax.legend(fontsize=5)
    for ax in axes[len(representations) :]:
        ax.set_visible(False)
    figure.suptitle(
        f"{task}: RMSE against training molecules (ID dashed, OOD solid; slopes)", fontsize=9
    )
    figure.tight_layout()
    return figure


def slope_table(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per task, representation and regressor: the ID and OOD slopes, and how
    much slower OOD error falls (OOD slope / ID slope; 1: at the same rate)."""
    slopes = curves.drop_duplicates(["task", "representation", "regressor", "set"])
    wide = slopes.pivot_table(
        index=["task", "representation", "regressor"], columns="set", values="slope"
    ).reset_index()
    wide = wide.rename(columns={"ID": "id_slope", "OOD": "ood_slope"})
    wide["ood_over_id"] = wide["ood_slope"] / wide["id_slope"]
    return wide


def slope_figure(slopes: pd.DataFrame) -> Figure:
    """Every (task, representation, regressor): its OOD slope against its ID slope; the
    diagonal is OOD error falling at the ID rate, 0 is OOD error not falling at all."""
    figure = new_figure()
    ax = figure.add_subplot()
    markers = dict(zip(sorted(slopes["task"].unique()), "os^Dv<>p", strict=False))
    representations = sorted(slopes["representation"].unique(), key=_representation_order)
    colours = {name: f"C{i}" for i, name in enumerate(representations)}
    for (task, representation), group in slopes.groupby(["task", "representation"]):
        ax.scatter(
            group["id_slope"],
            group["ood_slope"],
            marker=markers[task],
            color=colours[representation],
            s=18,
            label=f"{task} {representation}",
        )
    low = float(min(slopes["id_slope"].min(), slopes["ood_slope"].min(), -0.1)) - 0.05
    high = float(max(slopes["id_slope"].max(), slopes["ood_slope"].max(), 0.1)) + 0.05
    ax.plot([low, high], [low, high], color="0.5", lw=0.7)
    ax.axhline(0.0, color="0.5", lw=0.5, ls=":")
    ax.set_xlabel("ID slope (log RMSE / log n)")
    ax.set_ylabel("OOD slope")
    ax.set_title("Does OOD error fall at the ID rate? (diagonal: yes; 0: not at all)", fontsize=9)
    ax.legend(fontsize=5, ncol=2)
    return figure


def error_correlation(rows: pd.DataFrame, regressor: str) -> pd.DataFrame:
    """Per task, the Pearson correlation between every two representations' OOD errors
    (y_pred − y_true by molecule) with `regressor` on the full training set (seed 0
    where several), from each run's predictions.csv."""
    full = rows[(rows["split"] == FULL_SPLIT) & (rows["regressor"] == regressor)]
    full = full.sort_values("seed").drop_duplicates(["task", "representation"])
    out = []
    for task, group in full.groupby("task", sort=True):
        errors = {}
        for representation, folder in zip(group["representation"], group["folder"], strict=True):
            predictions = read_predictions_file(folder)
            ood = predictions[predictions["set"] == "ood"].set_index("mol_id")
            errors[representation] = ood["y_pred"] - ood["y_true"]
        frame = pd.DataFrame(errors)  # aligned by mol_id; a molecule left out is NaN
        order = sorted(frame.columns, key=_representation_order)
        correlation = frame[order].corr()
        for a in order:
            for b in order:
                out.append(
                    {
                        "task": task,
                        "regressor": regressor,
                        "a": a,
                        "b": b,
                        "error_correlation": correlation.loc[a, b],
                    }
                )
    return pd.DataFrame(out)


def similarity_figure(similarity: pd.DataFrame) -> Figure:
    """Per task, the representations' OOD error correlations as a heatmap."""
    tasks = sorted(similarity["task"].unique())
    figure = new_figure()
    figure.set_size_inches(4.2 * len(tasks), 3.8)
    axes = figure.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks, strict=True):
        part = similarity[similarity["task"] == task]
        order = sorted(part["a"].unique(), key=_representation_order)
        grid = part.pivot(index="a", columns="b", values="error_correlation").reindex(
            index=order, columns=order
        )
        values = grid.to_numpy(dtype=float)
        image = ax.imshow(values, cmap="RdBu_r", vmin=-1, vmax=1)
        for (i, j), value in np.ndenumerate(values):
            if np.isfinite(value) and i != j:
                colour = "white" if abs(value) > 0.6 else "black"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=5, color=colour)
        ax.set_xticks(range(len(order)), order, rotation=60, ha="right", fontsize=6)
        ax.set_yticks(range(len(order)), order, fontsize=6)
        ax.set_title(f"{task}: OOD error correlation", fontsize=8)
    figure.colorbar(image, ax=list(axes), shrink=0.8)
    return figure


def boom_best_deep(paper: pd.DataFrame) -> pd.DataFrame:
    """BOOM's best model that is not a descriptor model, per task, by its published OOD
    RMSE (`paper`: model, task, set, rmse rows of Tables 7 and 9), with the descriptor
    models' OOD RMSE."""
    ood = paper[(paper["set"] == "OOD") & paper["rmse"].notna()]
    out = []
    for task, group in ood.groupby("task", sort=True):
        deep = group[~group["model"].isin(BOOM_DESCRIPTOR_MODELS)]
        best = deep.loc[deep["rmse"].idxmin()] if not deep.empty else None
        entry = {
            "task": task,
            "boom_best_deep_model": None if best is None else best["model"],
            "boom_best_deep_ood_rmse": None if best is None else float(best["rmse"]),
        }
        for model in BOOM_DESCRIPTOR_MODELS:
            value = group.loc[group["model"] == model, "rmse"]
            entry[f"boom_{model.lower().replace(' ', '_')}_ood_rmse"] = (
                float(value.iloc[0]) if len(value) else None
            )
        out.append(entry)
    return pd.DataFrame(out)


def answers(table: pd.DataFrame, slopes: pd.DataFrame, boom: pd.DataFrame | None) -> pd.DataFrame:
    """Per task: the best BenchML representation × regressor by OOD RMSE (its ID RMSE and
    ratio), our random forest and MLP on descriptors where run, BOOM's best deep model
    (given its tables), and the median OOD/ID slope ratio of the learning curves."""
    benchml = table[~table["regressor"].isin(BASELINES)]
    out = []
    for task, part in benchml.groupby("task", sort=True):
        best = part.loc[part["ood_rmse"].idxmin()]
        per_representation = best_per_representation(part).sort_values("ood_rmse")
        entry = {
            "task": task,
            "best": f"{best['representation']}-{best['regressor']}",
            "best_ood_rmse": best["ood_rmse"],
            "best_id_rmse": best["id_rmse"],
            "best_ratio": best["ratio"],
            "ranking": "; ".join(
                f"{r} {v:.4g}"
                for r, v in zip(
                    per_representation["representation"],
                    per_representation["ood_rmse"],
                    strict=True,
                )
            ),
        }
        for baseline in BASELINES:
            rows = table[(table["task"] == task) & (table["regressor"] == baseline)]
            entry[f"{baseline}_ood_rmse"] = float(rows["ood_rmse"].iloc[0]) if len(rows) else None
            entry[f"{baseline}_id_rmse"] = float(rows["id_rmse"].iloc[0]) if len(rows) else None
        if not slopes.empty and task in set(slopes["task"]):
            task_slopes = slopes[slopes["task"] == task]
            entry["median_id_slope"] = float(task_slopes["id_slope"].median())
            entry["median_ood_slope"] = float(task_slopes["ood_slope"].median())
        out.append(entry)
    result = pd.DataFrame(out)
    if boom is not None and not result.empty:
        result = result.merge(boom, on="task", how="left")
    return result


def _regressor_order(name: str) -> tuple:
    order = ["ridge", "krr_linear", "krr_rbf", "krr_laplacian", "krr_tanimoto"]
    order += ["gp_linear", "gp_rbf", "gp_laplacian", "gp_tanimoto", "rf", "mlp"]
    return (order.index(name) if name in order else len(order), name)


def _representation_order(name: str) -> tuple:
    order = ["descriptors", "physchem", "ecfp4", "ecfp4_counts", "ecfp6", "ecfp6_counts"]
    order += ["coulomb", "soap", "acsf", "mbtr"]
    return (order.index(name) if name in order else len(order), name)


def write_benchml(
    runs: list[Run],
    out: Path,
    boom: pd.DataFrame | None = None,
    similarity_regressor: str = SIMILARITY_REGRESSOR,
) -> tuple[list[Path], pd.DataFrame]:
    """Every figure and table of the module docstring into `out`; the paths written and
    the answers table; `boom`: BOOM's published RMSEs (`boom_best_deep`)."""
    rows = benchml_rows(runs)
    table = rmse_table(rows)
    paths = write_outputs(table, rmse_figure(table), out, "benchml-rmse")
    paths += write_outputs(
        best_per_representation(table), ratio_figure(table), out, "benchml-ratio"
    )
    curves = learning_curve_table(rows)
    slopes = slope_table(curves) if not curves.empty else pd.DataFrame()
    if not curves.empty:
        for task in sorted(curves["task"].unique()):
            figure = learning_curve_figure(curves, task)
            part = curves[curves["task"] == task]
            paths += write_outputs(part, figure, out, f"benchml-learning-curves-{task}")
        paths += write_outputs(slopes, slope_figure(slopes), out, "benchml-slopes")
    similarity = error_correlation(rows, similarity_regressor)
    if not similarity.empty:
        paths += write_outputs(similarity, similarity_figure(similarity), out, "benchml-similarity")
    answered = answers(table, slopes, boom_best_deep(boom) if boom is not None else None)
    answers_path = out / "benchml-answers.csv"
    answered.to_csv(answers_path, index=False)
    return [*paths, answers_path], answered
