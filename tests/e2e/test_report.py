"""End-to-end leaderboard CLI on fake runs with hand-computed seed statistics."""

import json
import os

import pandas as pd
import pytest
from door_helpers import shared_doors

from oodmol.report.tables import TABLES, label_benchmarks, markdown_table, summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# (model, task) -> (id.rmse, ood.rmse, id.r2, ood.binned_r2) per seed 0, 1, 2.
# Each triple is centre ± d, so mean = centre and sample std (ddof=1) = d.
RUNS = {
    ("rf", "csd10k_density"): (
        [0.04, 0.05, 0.06],
        [0.1, 0.2, 0.3],
        [0.88, 0.9, 0.92],
        [0.25, 0.3, 0.35],
    ),
    ("gnn", "csd10k_density"): (
        [0.03, 0.04, 0.05],
        [0.12, 0.15, 0.18],
        [0.9, 0.95, 1.0],
        [0.4, 0.5, 0.6],
    ),
    ("rf", "qm9_gap"): ([0.2, 0.3, 0.4], [1.0, 1.2, 1.4], [0.7, 0.8, 0.9], [0.1, 0.2, 0.3]),
    # One undefined binned R² (null): mean of 0.5, 0.7 = 0.6, std = sqrt(0.02) = 0.1414, n = 2.
    ("gnn", "qm9_gap"): ([0.1, 0.2, 0.3], [0.5, 0.6, 0.7], [0.8, 0.85, 0.9], [0.5, None, 0.7]),
}


def _record(model, task, seed, split_hash="abc123def456"):
    id_rmse, ood_rmse, id_r2, ood_r2 = (values[seed] for values in RUNS[(model, task)])
    return {
        "task": task,
        "split": "ood",
        "model": model,
        "seed": seed,
        "split_hash": split_hash,
        "n_params": 10,
        "train_seconds": 1.0,
        "id": {
            "n": 5,
            "rmse": id_rmse,
            "mae": 0.0,
            "r2": id_r2,
            "pearson_r2": id_r2,
            "spearman": 0.5,
        },
        "ood": {
            "n": 5,
            "rmse": ood_rmse,
            "mae": 0.0,
            "r2": 0.1,
            "spearman": 0.5,
            "binned_r2": ood_r2,
            "binned_pearson_r2": ood_r2,
            "r2_low": 0.0,
            "r2_high": 0.0,
        },
        "versions": {"oodmol": "0.1.0"},
        "uq": {"nll": 1.0},
    }


def _run_cli(runs_dir, out_dir):
    """`oodmol report` in a fork of the worker's zygote (the imports spent once)."""
    argv = ["-m", "oodmol.cli", "report", str(runs_dir), "--out", str(out_dir)]
    return shared_doors().run(argv, env=dict(os.environ), timeout=60)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    runs = root / "runs"
    for model, task in RUNS:
        for seed in range(3):
            run_dir = runs / task / model / f"seed{seed}"
            run_dir.mkdir(parents=True)
            (run_dir / "metrics.json").write_text(json.dumps(_record(model, task, seed)))
    bad = runs / "broken" / "metrics.json"
    bad.parent.mkdir()
    bad.write_text('{"task": "csd10k_density", "model": ')
    result = _run_cli(runs, root / "out")
    return result, root / "out", bad


def _md_row(md, task, set_name):
    return next(line for line in md.splitlines() if line.startswith(f"| {task} | {set_name} |"))


def test_cli_succeeds_and_reports_malformed_file(report):
    result, _, bad = report
    assert result.returncode == 0, result.stderr
    assert f"skipped {bad}: unreadable" in result.stderr
    assert "skipped 1 metrics.json file(s)" in result.stderr


def test_rmse_markdown_has_mean_std_and_bold_best(report):
    _, out, _ = report
    md = (out / "rmse.md").read_text()
    assert "| Task | Set | gnn | rf |" in md
    assert _md_row(md, "csd10k_density", "OOD") == (
        "| csd10k_density | OOD | **0.15 ± 0.03** (n=3) | 0.2 ± 0.1 (n=3) |"
    )
    assert _md_row(md, "qm9_gap", "ID") == (
        "| qm9_gap | ID | **0.2 ± 0.1** (n=3) | 0.3 ± 0.1 (n=3) |"
    )
    assert "ddof=1" in md and "n=1 only the mean" in md


def test_r2_table_uses_booms_r2_for_id_and_binned_r2_for_ood(report):
    _, out, _ = report
    md = (out / "r2.md").read_text()
    assert _md_row(md, "csd10k_density", "ID") == (
        "| csd10k_density | ID | **0.95 ± 0.05** (n=3) | 0.9 ± 0.02 (n=3) |"
    )
    assert _md_row(md, "qm9_gap", "OOD") == (
        "| qm9_gap | OOD | **0.6 ± 0.1414** (n=2) | 0.2 ± 0.1 (n=3) |"
    )


def test_csv_tables_and_runs(report):
    _, out, _ = report
    rmse = pd.read_csv(out / "rmse.csv").set_index(["benchmark", "model", "set"])
    cell = rmse.loc[("csd10k_density", "rf", "OOD")]
    assert cell["mean"] == pytest.approx(0.2)
    assert cell["std"] == pytest.approx(0.1)
    assert cell["n_seeds"] == 3
    r2 = pd.read_csv(out / "r2.csv").set_index(["benchmark", "model", "set"])
    cell = r2.loc[("qm9_gap", "gnn", "OOD")]
    assert cell["source"] == "ood.binned_pearson_r2"
    assert (cell["mean"], cell["std"], cell["n_seeds"]) == pytest.approx((0.6, 0.02**0.5, 2))
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 12
    assert {"ood.binned_r2", "versions.oodmol", "uq.nll", "path"} <= set(runs.columns)


def test_heatmap_is_png(report):
    _, out, _ = report
    assert (out / "heatmap.png").read_bytes()[:8] == PNG_MAGIC


def test_empty_folder_exits_nonzero(tmp_path):
    (tmp_path / "runs").mkdir()
    result = _run_cli(tmp_path / "runs", tmp_path / "out")
    assert result.returncode != 0
    assert "no valid metrics.json" in result.stderr


def test_different_split_hashes_are_not_averaged():
    runs = pd.json_normalize(
        [_record("rf", "qm9_gap", 0, "aaaaaaaa11"), _record("rf", "qm9_gap", 1, "bbbbbbbb22")],
        sep=".",
    )
    labelled, warnings = label_benchmarks(runs)
    assert sorted(labelled["benchmark"]) == ["qm9_gap [aaaaaaaa]", "qm9_gap [bbbbbbbb]"]
    assert len(warnings) == 1 and "2 different split_hash" in warnings[0]
    md = markdown_table(summarize(labelled), TABLES[0])
    # id.rmse of seed 0 = 0.2 and of seed 1 = 0.3, each alone: mean only, n=1.
    assert _md_row(md, "qm9_gap [aaaaaaaa]", "ID") == "| qm9_gap [aaaaaaaa] | ID | **0.2** (n=1) |"
    assert _md_row(md, "qm9_gap [bbbbbbbb]", "ID") == "| qm9_gap [bbbbbbbb] | ID | **0.3** (n=1) |"


# ------------------------------------------------------- like with like (flags, keys)


@pytest.fixture(scope="module")
def flagged_report(tmp_path_factory):
    """Full rf runs beside an rf subset run that would beat them, an external file
    without a seed that misses molecules, a failed run, a search trial, and gnn run with
    two configurations."""
    root = tmp_path_factory.mktemp("flagged")
    runs = root / "runs"

    def write(name: str, record: dict) -> None:
        folder = runs / name
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps(record))

    for seed in range(3):
        write(f"rf/{seed}", {**_record("rf", "qm9_gap", seed), "config_key": "aaaa0000"})
        subset = _record("rf", "qm9_gap", seed) | {"config_key": "bbbb0000", "flags": ["subset"]}
        subset["id"] = {**subset["id"], "rmse": 0.01}  # far better: it must not shadow rf
        write(f"rf_subset/{seed}", subset)
        for key, name in (("cccc0000", "gnn_a"), ("dddd0000", "gnn_b")):
            write(f"{name}/{seed}", {**_record("gnn", "qm9_gap", seed), "config_key": key})
    external = _record("rf", "qm9_gap", 0) | {
        "model": "llm",
        "seed": None,
        "flags": ["external", "partial"],
    }
    write("llm", external)
    failed = {k: v for k, v in _record("rf", "qm9_gap", 0).items() if k not in ("id", "ood")}
    failed |= {"status": "failed", "failure": {"message": "training diverged at epoch 3"}}
    write("failed", failed)
    trial = {k: v for k, v in _record("rf", "qm9_gap", 0).items() if k not in ("id", "ood")}
    write("trial", trial | {"objective": {"name": "val_loss", "value": 0.1, "epoch": 2}})
    result = _run_cli(runs, root / "out")
    assert result.returncode == 0, result.stderr
    return result, root / "out", runs


def test_flagged_runs_stand_beside_full_runs_never_for_them(flagged_report):
    _, out, _ = flagged_report
    md = (out / "rmse.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Task | Set |"))
    columns = [c.strip() for c in header.strip("|").split("|")][2:]
    assert columns == [
        "gnn @cccc0000",
        "gnn @dddd0000",
        "llm [external, partial]",
        "rf",
        "rf [subset]",
    ]
    id_row = _md_row(md, "qm9_gap", "ID")
    # rf keeps its own three seeds; the subset run's 0.01 is shown but never bold
    assert "| 0.3 ± 0.1 (n=3) | 0.01 ± 0 (n=3) |" in id_row
    assert "**0.01" not in id_row and "**0.2 ± 0.1** (n=3)" in id_row
    assert "[subset]: trained and tested on a subset (max_molecules)." in md
    assert "[partial]: external predictions that miss test molecules." in md


def test_external_predictions_without_a_seed_are_a_run(flagged_report):
    _, out, _ = flagged_report
    runs = pd.read_csv(out / "runs.csv")
    external = runs[runs["model_name"] == "llm"]
    assert len(external) == 1 and external["seed"].isna().all()


def test_runs_without_test_metrics_are_skipped_with_the_reason(flagged_report):
    result, _, runs = flagged_report
    assert f"skipped {runs / 'failed' / 'metrics.json'}: a failed run: training diverged" in (
        result.stderr
    )
    assert f"skipped {runs / 'trial' / 'metrics.json'}: a search trial" in result.stderr
