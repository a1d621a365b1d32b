#!/usr/bin/env python3
"""Convert BOOM's published tables (CSV files typed from the paper) into the one data
file the report ships: src/oodmol/report/boom_paper.json.

Usage: scripts/boom_paper_json.py [CSV_FOLDER] [--out FILE]

CSV_FOLDER defaults to ../shared/boom_paper beside the repository. The package reads only
the JSON (the CSVs are not shipped): this script is how the JSON was made, so that every
number in it can be traced to a table of the paper and every correction to a known
defect listed in the file itself. Run it again after correcting a CSV.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "boom_paper"
DEFAULT_OUT = ROOT / "src" / "oodmol" / "report" / "boom_paper.json"

CITATION = (
    "E. R. Antoniuk, S. Zaman, T. Ben-Nun, P. Li, J. Diffenderfer, B. Demirci, "
    "O. Smolenski, T. Hsu, A. M. Hiszpanski, K. Chiu, B. Kailkhura, B. Van Essen. "
    "BOOM: Benchmarking Out-Of-distribution Molecular Property Predictions of Machine "
    "Learning Models. arXiv:2505.01912 (2025)."
)
URL = "https://arxiv.org/abs/2505.01912"
CODE = "https://github.com/FLASK-LLNL/BOOM"

# the paper's model names -> this project's model names (configs/model/<name>.yaml)
MODELS = {
    "Random Forest": "rf",
    "MLP": "mlp",
    "ChemBERTa": "chemberta",
    "MoLFormer": "molformer",
    "RT": "rt",
    "ModernBERT": "modernbert",
    "Chemprop": "chemprop",
    "TGNN": "tgnn",
    "IGNN": "ignn",
    "EGNN": "egnn",
    "MACE": "mace",
    "GotenNet": "gotennet",
    "Graphormer": "graphormer3d",
    "Geoformer": "geoformer",
    "ET": "et",
}
# Table 1's and Table 8's representation groups -> this project's groups
GROUPS = {"3D": "3D", "Graph": "graph", "SMILES": "SMILES"}
TABLE8_PAIRS = {
    "p_mwu_geometric_gt_transformer": ["3D", "SMILES"],
    "p_mwu_geometric_gt_graph": ["3D", "graph"],
    "p_mwu_graph_gt_transformer": ["graph", "SMILES"],
}
# Table 5 and 6 as typed split the group "No Bias" over two cells: "MLP No","Bias"
SPLIT_GROUP = {"MLP No": "MLP", "Random Forest No": "Random Forest"}

DEFECTS = [
    {
        "table": "table7",
        "defect": "Graphormer's OOD row repeats MoLFormer's OOD RMSEs (identical in 9 of "
        "the 10 tasks, all but csd10k_hof): almost certainly a copy error.",
        "handling": "Graphormer's OOD RMSEs are null (unknown) for every task.",
    },
    {
        "table": "table7",
        "defect": "The descriptor-based Random Forest and MLP are labelled 'SMILES'.",
        "handling": "Kept as printed in paper_representation; the report groups them "
        "as 'descriptors' (oodmol.report.representation).",
    },
    {
        "table": "table1",
        "defect": "The 'SMILES' averages include models on RDKit descriptors (see Table 7).",
        "handling": "Kept as printed; compared with our SMILES group, which does not.",
    },
    {
        "table": "table2",
        "defect": "Table 2 and appendix E's Table 10 swap the units of density (g/cm³) "
        "and HoF (kcal/mol).",
        "handling": "Not shipped; this project's task configs carry the right units.",
    },
    {
        "table": "table3",
        "defect": "GeoFormer is given Graphormer's parameter count (47.1M).",
        "handling": "Not shipped.",
    },
    {
        "table": "table5, table6",
        "defect": "Not the paper's: the typed CSVs split the group 'No Bias' into the model "
        "name ('MLP No', 'Random Forest No') and the group ('Bias').",
        "handling": "Read as model 'MLP' / 'Random Forest', group 'No Bias'.",
    },
]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _set_task(row: dict[str, str]) -> tuple[str, str]:
    return row["set"], row["task"]


def _model_rows(path: Path, value_columns: tuple[str, ...], label: str | None) -> list[list]:
    """[model, paper_model, (label,) set, task, values...] per row; the split "No Bias"
    group of Tables 5 and 6 mended (see DEFECTS)."""
    rows = []
    for row in _rows(path):
        paper_model = SPLIT_GROUP.get(row["model"], row["model"])
        prefix = [MODELS[paper_model], paper_model]
        if label:
            prefix.append("No Bias" if row["model"] in SPLIT_GROUP else row[label])
        values = [float(row[c]) for c in value_columns]
        rows.append([*prefix, row["set"], row["task"], *values])
    return rows


def _table7_rows(path: Path) -> list[list]:
    """Table 7 with Graphormer's copied OOD RMSEs made unknown (see DEFECTS)."""
    rows = _model_rows(path, ("rmse",), "representation")
    for row in rows:
        if row[1] == "Graphormer" and row[3] == "OOD":
            row[-1] = None
    return rows


def tables(source: Path) -> dict[str, dict]:
    """Every shipped table as {title, columns, rows}."""
    return {
        "table1": {
            "title": "Table 1: RMSE averaged by representation",
            "columns": ["representation", "paper_representation", "set", "task", "rmse"],
            "rows": [
                [GROUPS[r["representation"]], r["representation"], *_set_task(r), float(r["rmse"])]
                for r in _rows(source / "table1_rmse_by_representation.csv")
            ],
        },
        "table4": {
            "title": "Table 4: seconds per training epoch on the 10k set and QM9, and the device",
            "columns": ["model", "paper_model", "device", "seconds_10k", "seconds_qm9"],
            "rows": [
                [
                    MODELS[r["model"]],
                    r["model"],
                    r["device"],
                    float(r["seconds_per_epoch_10k"]),
                    float(r["seconds_per_epoch_qm9"]),
                ]
                for r in _rows(source / "table4_runtimes.csv")
            ],
        },
        "table5": {
            "title": "Table 5: ID R² and OOD binned R² (mean of 3 runs)",
            "columns": ["model", "paper_model", "paper_group", "set", "task", "r2"],
            "rows": _model_rows(source / "table5_r2.csv", ("r2",), "group"),
        },
        "table6": {
            "title": "Table 6: standard deviation of Table 5 over the 3 runs",
            "columns": ["model", "paper_model", "paper_group", "set", "task", "r2_std"],
            "rows": _model_rows(source / "table6_r2_std.csv", ("r2_std",), "group"),
        },
        "table7": {
            "title": "Table 7: ID and OOD RMSE (mean of 3 runs)",
            "columns": ["model", "paper_model", "paper_representation", "set", "task", "rmse"],
            "rows": _table7_rows(source / "table7_rmse.csv"),
        },
        "table8": {
            "title": "Table 8: Kruskal-Wallis and one-sided Mann-Whitney U p-values "
            "(printed to 5 decimals: 0.0 is below 0.000005)",
            "columns": ["task", "n", "test", "better", "worse", "p"],
            "rows": [
                row
                for r in _rows(source / "table8_statistics.csv")
                for row in (
                    [[r["task"], int(r["n"]), "kruskal", None, None, float(r["p_kruskal_wallis"])]]
                    + [
                        [r["task"], int(r["n"]), "mannwhitneyu", *pair, float(r[column])]
                        for column, pair in TABLE8_PAIRS.items()
                    ]
                )
            ],
        },
        "table9": {
            "title": "Table 9: Lipophilicity RMSE (mean ± sd of 3 runs)",
            "columns": ["model", "paper_model", "set", "task", "rmse", "rmse_std"],
            "rows": _model_rows(
                source / "table9_lipophilicity_rmse.csv", ("rmse", "rmse_std"), None
            ),
        },
    }


def document(source: Path) -> dict:
    return {
        "citation": CITATION,
        "url": URL,
        "code": CODE,
        "runs_per_value": 3,
        "note": "Numbers as printed in the paper, typed from its tables; task names are "
        "this project's; 'model' is this project's model name, 'paper_model' the paper's.",
        "models": MODELS,
        "defects": DEFECTS,
        "tables": tables(source),
    }


def dumps(doc: dict) -> str:
    """JSON with one table row per line: small, and diffs show which numbers changed."""
    head = {k: v for k, v in doc.items() if k != "tables"}
    text = json.dumps(head, indent=2, ensure_ascii=False)[:-2] + ',\n  "tables": {\n'
    parts = []
    for name, table in doc["tables"].items():
        rows = ",\n".join("        " + json.dumps(r, ensure_ascii=False) for r in table["rows"])
        parts.append(
            f'    "{name}": {{\n'
            f'      "title": {json.dumps(table["title"], ensure_ascii=False)},\n'
            f'      "columns": {json.dumps(table["columns"])},\n'
            f'      "rows": [\n{rows}\n      ]\n    }}'
        )
    return text + ",\n".join(parts) + "\n  }\n}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    text = dumps(document(args.source))
    json.loads(text)  # the hand-laid layout must still be JSON
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
