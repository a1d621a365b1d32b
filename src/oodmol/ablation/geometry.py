"""Geometry as a benchmark axis (experiment=geometry): do 3D models rank differently out
of distribution when they read GFN2-xTB geometries instead of MMFF94 ones, and does their
gap to the 2D models change?

Runs of `geometry_filter` (the same molecules for every geometry) are grouped by task,
model and geometry (`conformers`; a model that reads no 3D geometry is "2d"). A group
holds one configuration, and a model's groups differ in their geometry alone: runs of
another epoch budget or other settings in the same folder are refused, never averaged
in as seeds or compared across geometries (`one_configuration`). Per group:
mean and sd over seeds of the ID and OOD RMSE; per task and geometry the 3D models' OOD
rank (1: lowest RMSE) and each 3D model's OOD RMSE over the best 2D model's (the gap).
Per 3D model, the change of its OOD RMSE from MMFF94 to the other geometry, paired by
seed, with its 95 % interval: seeds move a model's error as much as a geometry may.

Per molecule, with a geometry report (`oodmol data geometry conformers=xtb`,
its CSV): the change of a model's absolute error from its MMFF94 run to its GFN2-xTB run
of the same task and seed, against how far GFN2-xTB moved the molecule (RMSD) and how
much energy it gained.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from oodmol.ablation.runs import Run
from oodmol.errors import InputError
from oodmol.plotting import new_figure
from oodmol.predictions import read_predictions_file

FLAT = "2d"  # the geometry of a model that reads none
GRAPH3D = "Graph3D"


def geometry_of(run: Run) -> str:
    """The geometry a run's model read: its `conformers` name, or "2d" for a model whose
    featuriser is not 3D; runs recorded before geometries could be chosen read MMFF94."""
    target = str(run.setting("model", "featurizer", "_target_"))
    if not target.endswith(GRAPH3D):
        return FLAT
    try:
        return str(run.setting("conformers", "name"))
    except InputError:
        return "mmff"


def geometry_rows(runs: list[Run]) -> pd.DataFrame:
    """One row per run trained on the molecules a geometry filter kept: task, model,
    geometry, seed, ID and OOD RMSE, and its folder."""
    rows = []
    for run in runs:
        data = run.metrics.get("data") or {}
        if "geometry_filter" not in data:
            continue
        rows.append(
            {
                "task": run.metrics["task"],
                "model": run.metrics["model"],
                "geometry": geometry_of(run),
                "seed": run.metrics.get("seed"),
                "id_rmse": run.metrics["id"]["rmse"],
                "ood_rmse": run.metrics["ood"]["rmse"],
                "n_ood": run.metrics["ood"].get("n"),
                "config_key": run.metrics.get("config_key"),
                "model_settings": json.dumps(_model_settings(run), sort_keys=True),
                "folder": str(run.folder),
            }
        )
    if not rows:
        raise InputError("no complete run with a geometry filter (experiment=geometry) found")
    frame = pd.DataFrame(rows)
    one_configuration(frame)
    return frame


def _model_settings(run: Run) -> dict:
    """The model's settings as the run stored them (its epoch budget among them)."""
    try:
        settings = run.setting("model")
    except InputError:  # a run without its stored config: its record's budget
        settings = {"max_epochs": (run.metrics.get("training") or {}).get("max_epochs")}
    return settings if isinstance(settings, dict) else {}


def one_configuration(rows: pd.DataFrame) -> None:
    """Refuse, in one line, runs that the comparison would mix: two runs of one task,
    model, geometry and seed; two configurations of one task, model and geometry; a
    model's runs whose settings differ from one geometry to another."""
    place = "point the report at a folder with one configuration of each model"
    for (task, model, geometry, seed), group in rows.groupby(
        ["task", "model", "geometry", "seed"], dropna=False
    ):
        if len(group) > 1:
            raise InputError(
                f"{task}, {model} on {geometry} geometries, "
                f"seed {'not recorded' if pd.isna(seed) else int(seed)}: {len(group)} runs "
                f"({', '.join(group['folder'])}); {place}"
            )
    for (task, model, geometry), group in rows.groupby(["task", "model", "geometry"]):
        keys = sorted(group["config_key"].dropna().unique())
        if len(keys) > 1:
            raise InputError(
                f"{task}, {model} on {geometry} geometries: runs of {len(keys)} configurations "
                f"(keys {', '.join(keys)}); {place}"
            )
    for (task, model), group in rows.groupby(["task", "model"]):
        settings = group.drop_duplicates("geometry").set_index("geometry")["model_settings"]
        first = settings.index[0]
        for geometry in settings.index[1:]:
            differ = _differences(json.loads(settings[first]), json.loads(settings[geometry]))
            if differ:
                raise InputError(
                    f"{task}, {model}: its {first} and {geometry} runs differ in "
                    f"{'; '.join(differ[:3])}; {place}"
                )


def _differences(ours: dict, theirs: dict, prefix: str = "model.") -> list[str]:
    """'<key>: <ours> against <theirs>' for every setting in which the two differ."""
    out = []
    for key in sorted(set(ours) | set(theirs)):
        a, b = ours.get(key), theirs.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a} against {b}")
    return out


def geometry_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task, model and geometry: seeds, mean and sd of ID and OOD RMSE, the OOD rank
    among the 3D models of that geometry, and the OOD RMSE over the best 2D model's."""
    for task, group in rows.groupby("task"):
        if group["n_ood"].nunique() > 1:
            sizes = sorted(group["n_ood"].unique().tolist())
            raise InputError(f"{task}: runs scored on OOD sets of sizes {sizes}")
    stats = (
        rows.groupby(["task", "model", "geometry"], sort=True)
        .agg(
            seeds=("seed", "nunique"),
            id_rmse_mean=("id_rmse", "mean"),
            id_rmse_sd=("id_rmse", "std"),
            ood_rmse_mean=("ood_rmse", "mean"),
            ood_rmse_sd=("ood_rmse", "std"),
        )
        .reset_index()
    )
    three_d = stats["geometry"] != FLAT
    stats["ood_rank_3d"] = np.nan
    stats.loc[three_d, "ood_rank_3d"] = (
        stats[three_d].groupby(["task", "geometry"])["ood_rmse_mean"].rank(method="min")
    )
    best_flat = stats[~three_d].groupby("task")["ood_rmse_mean"].min()
    stats["ood_over_best_2d"] = stats["ood_rmse_mean"] / stats["task"].map(best_flat)
    return stats


def ranking_answer(table: pd.DataFrame) -> list[str]:
    """Per task, the 3D models' OOD order under each geometry and whether it changed, and
    the best 3D model's OOD RMSE over the best 2D model's under each geometry."""
    lines = []
    for task, group in table[table["geometry"] != FLAT].groupby("task"):
        orders = {}
        for geometry, g in group.groupby("geometry"):
            orders[geometry] = g.sort_values("ood_rmse_mean")["model"].tolist()
        shown = "; ".join(f"{geo}: {' < '.join(order)}" for geo, order in orders.items())
        same = len({tuple(o) for o in orders.values()}) == 1
        lines.append(f"{task}: OOD RMSE order {shown} ({'same' if same else 'changed'})")
        gaps = group.groupby("geometry")["ood_over_best_2d"].min().dropna()
        if len(gaps):
            shown = "; ".join(f"{geo}: {gap:.3g}" for geo, gap in gaps.items())
            lines.append(f"{task}: best 3D OOD RMSE / best 2D OOD RMSE {shown}")
    return lines


def paired_changes(rows: pd.DataFrame, base: str = "mmff") -> pd.DataFrame:
    """Per task, 3D model and other geometry: its OOD RMSE minus that on `base`, paired by
    seed (the same split, model and seed on either geometry), as the mean over the seeds
    both have, their sd and the 95 % interval's half-width (Student's t; NaN under two
    seeds), the mean relative to `base`'s, and on how many seeds the other was lower."""
    out = []
    three_d = rows[rows["geometry"] != FLAT]
    for (task, model), group in three_d.groupby(["task", "model"]):
        by_seed = group.pivot_table(index="seed", columns="geometry", values="ood_rmse")
        if base not in by_seed:
            continue
        for geometry in sorted(set(by_seed.columns) - {base}):
            pair = by_seed[[base, geometry]].dropna()
            if pair.empty:
                continue
            change = pair[geometry] - pair[base]
            n = len(change)
            sd = float(change.std(ddof=1)) if n > 1 else float("nan")
            half = float(stats.t.ppf(0.975, n - 1) * sd / np.sqrt(n)) if n > 1 else float("nan")
            out.append(
                {
                    "task": task,
                    "model": model,
                    "geometry": geometry,
                    "seeds": n,
                    "ood_rmse_base": float(pair[base].mean()),
                    "ood_rmse": float(pair[geometry].mean()),
                    "ood_change_mean": float(change.mean()),
                    "ood_change_sd": sd,
                    "ood_change_ci95": half,
                    "ood_change_relative": float(change.mean() / pair[base].mean()),
                    "seeds_lower": int((change < 0).sum()),
                }
            )
    return pd.DataFrame(out)


def paired_answer(paired: pd.DataFrame, base: str = "mmff") -> list[str]:
    """One line per model: the paired OOD RMSE change, its interval and its sign count."""
    lines = []
    for row in paired.itertuples():
        interval = "" if np.isnan(row.ood_change_ci95) else f" ± {row.ood_change_ci95:.3g}"
        seeds = f"{row.seeds} paired seed{'s' if row.seeds > 1 else ''}"
        lines.append(
            f"{row.task}, {row.model}: OOD RMSE on {row.geometry} minus on {base}: "
            f"{row.ood_change_mean:+.3g}{interval} ({row.ood_change_relative:+.1%}), "
            f"{seeds}{', 95 % interval' if interval else ''}, "
            f"lower on {row.seeds_lower} of {row.seeds}"
        )
    return lines


def molecule_changes(rows: pd.DataFrame, changes_csv: Path, base: str = "mmff") -> pd.DataFrame:
    """Per molecule, 3D model, task and seed that have a run on `base` and on another
    geometry: its test set, absolute errors on both, their change, and the geometry
    change (RMSD heavy/all atoms, energy change) from the report's CSV."""
    changes = pd.read_csv(changes_csv)
    needed = {"mol_id", "rmsd_heavy", "rmsd_all", "energy_change_kcal"}
    if not needed <= set(changes.columns):
        raise InputError(f"{changes_csv}: not a geometry report CSV (columns {sorted(needed)})")
    out = []
    three_d = rows[rows["geometry"] != FLAT]
    for (task, model, seed), group in three_d.groupby(["task", "model", "seed"]):
        by_geometry = dict(zip(group["geometry"], group["folder"], strict=True))
        if base not in by_geometry:
            continue
        reference = _errors(by_geometry.pop(base))
        for geometry, folder in by_geometry.items():
            other = _errors(folder)
            both = reference.merge(other, on=["mol_id", "set"], suffixes=("_base", "_other"))
            both["task"], both["model"], both["seed"], both["geometry"] = (
                task,
                model,
                seed,
                geometry,
            )
            both["error_change"] = both["abs_error_other"] - both["abs_error_base"]
            out.append(both)
    if not out:
        raise InputError(f"no 3D model with runs on {base!r} and another geometry")
    frame = pd.concat(out, ignore_index=True)
    return frame.merge(changes[sorted(needed)], on="mol_id", how="left")


def _errors(folder: str) -> pd.DataFrame:
    predictions = read_predictions_file(folder)
    predictions = predictions[predictions["set"].isin(["id", "ood"])]
    return pd.DataFrame(
        {
            "mol_id": predictions["mol_id"],
            "set": predictions["set"],
            "abs_error": (predictions["y_pred"] - predictions["y_true"]).abs(),
        }
    )


def geometry_figure(
    table: pd.DataFrame, molecules: pd.DataFrame | None, paired: pd.DataFrame | None = None
) -> Figure:
    """ID and OOD RMSE per model and geometry (one panel per task); with paired changes,
    each 3D model's OOD RMSE change between the geometries with its 95 % interval; with
    per-molecule data, the change of absolute error against RMSD and against energy change."""
    tasks = sorted(table["task"].unique())
    show_paired = paired is not None and not paired.empty
    n_columns = len(tasks) + show_paired + (2 if molecules is not None else 0)
    figure = new_figure()
    figure.set_size_inches(4.2 * n_columns, 4.0)
    geometries = sorted(table["geometry"].unique())
    for column, task in enumerate(tasks):
        ax = figure.add_subplot(1, n_columns, column + 1)
        group = table[table["task"] == task]
        models = sorted(group["model"].unique())
        width = 0.8 / max(1, len(geometries))
        for k, geometry in enumerate(geometries):
            g = group[group["geometry"] == geometry].set_index("model").reindex(models)
            x = np.arange(len(models)) + k * width
            ax.bar(
                x,
                g["ood_rmse_mean"],
                width,
                yerr=g["ood_rmse_sd"].fillna(0),
                label=f"{geometry} OOD",
            )
            ax.plot(x, g["id_rmse_mean"], "k_", ms=10, mew=2)
        ax.set_xticks(np.arange(len(models)) + 0.4 - width / 2, models, rotation=45, fontsize=7)
        ax.set_title(f"{task} (bars: OOD, ticks: ID)", fontsize=8)
        ax.set_ylabel("test RMSE")
        ax.legend(fontsize=6)
    if show_paired:
        _draw_paired(figure.add_subplot(1, n_columns, len(tasks) + 1), paired)
    if molecules is not None:
        for offset, (column, label) in enumerate(
            (
                ("rmsd_heavy", "RMSD MMFF94 → GFN2-xTB, heavy atoms (Å)"),
                ("energy_change_kcal", "GFN2-xTB energy change (kcal/mol)"),
            )
        ):
            ax = figure.add_subplot(1, n_columns, len(tasks) + show_paired + offset + 1)
            for (model, set_name), g in molecules.groupby(["model", "set"]):
                ax.scatter(
                    g[column], g["error_change"], s=3, alpha=0.4, label=f"{model} {set_name}"
                )
            ax.axhline(0.0, color="grey", lw=0.8, ls="--")
            ax.set_xlabel(label, fontsize=8)
            ax.set_ylabel("|error| change (other geometry − MMFF94)", fontsize=8)
            ax.legend(fontsize=5, markerscale=3)
    figure.tight_layout()
    return figure


def _draw_paired(ax, paired: pd.DataFrame) -> None:
    """Per task and 3D model, the paired OOD RMSE change in % of the base geometry's, with
    its 95 % interval (none under two seeds); 0 marked: an interval across it is no change
    the seeds can tell."""
    labels = []
    for row, item in enumerate(paired.itertuples()):
        scale = 100.0 / item.ood_rmse_base
        half = None if np.isnan(item.ood_change_ci95) else item.ood_change_ci95 * scale
        ax.errorbar(item.ood_change_mean * scale, row, xerr=half, fmt="o", color="tab:blue")
        seeds = f"{item.seeds} seed{'s' if item.seeds > 1 else ''}"
        labels.append(f"{item.task} {item.model} ({item.geometry}, {seeds})")
    ax.axvline(0.0, color="grey", lw=0.8, ls="--")
    ax.set_yticks(np.arange(len(labels)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("OOD RMSE change from MMFF94 (%, 95 % interval)", fontsize=8)
    ax.set_title("paired by seed", fontsize=8)
