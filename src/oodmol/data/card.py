"""A dataset card: what a split holds, in numbers and in BOOM's Figure 1 picture."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from oodmol.data.splits.assignment import SETS, SplitAssignment
from oodmol.data.task import TaskData

# BOOM Figure 1 colours: training distribution grey-blue, ID orange, OOD blue.
COLOURS = {"train": "#9aa5b1", "val": "#c7ced6", "id": "#ff7f0e", "ood": "#1f77b4"}


def write_card(data: TaskData, split: SplitAssignment, out_dir: Path) -> Path:
    """Write card.json, card.md and card.png into out_dir; returns the PNG path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    y_of = {name: data.y[data.table.rows_of(split.sets[name])] for name in SETS}
    summary = {
        "task": data.task.name,
        "description": data.task.description,
        "property": data.task.property,
        "units": data.task.units,
        "extensive": data.task.extensive,
        "split": split.info.get("splitter"),
        "split_hash": split.hash,
        "sets": {
            name: {
                "n": len(v),
                "min": float(v.min()) if len(v) else None,
                "max": float(v.max()) if len(v) else None,
                "mean": float(v.mean()) if len(v) else None,
            }
            for name, v in y_of.items()
        },
        "data_report": data.report.to_dict(),
        "split_info": split.info,
    }
    (out_dir / "card.json").write_text(json.dumps(summary, indent=2))
    (out_dir / "card.md").write_text(_markdown(summary))
    png = out_dir / "card.png"
    _histogram(y_of, data.task.label(), f"{data.task.name} — {summary['split']} split").savefig(
        png, dpi=150, bbox_inches="tight"
    )
    return png


def _markdown(summary: dict) -> str:
    lines = [
        f"# {summary['task']} ({summary['split']} split)",
        "",
        summary["description"],
        "",
        f"Property: {summary['property']} ({summary['units']}), "
        f"{'extensive' if summary['extensive'] else 'intensive'}. "
        f"Split hash `{summary['split_hash']}`.",
        "",
        "| set | n | min | max | mean |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in summary["sets"].items():
        cells = [f"{s[k]:.6g}" if s[k] is not None else "–" for k in ("min", "max", "mean")]
        lines.append(f"| {name} | {s['n']} | " + " | ".join(cells) + " |")
    report = summary["data_report"]
    lines += ["", f"Validation: read {report['n_read']}, kept {report['n_kept']}."]
    for f in report["findings"]:
        lines.append(
            f"- {f['count']} {f['action']}: {f['reason']} (e.g. {', '.join(f['examples'][:3])})"
        )
    return "\n".join(lines) + "\n"


def _histogram(y_of: dict[str, np.ndarray], xlabel: str, title: str) -> Figure:
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    everything = np.concatenate(list(y_of.values()))
    bins = np.histogram_bin_edges(everything, bins=80)
    stacks = [
        ("train", np.concatenate([y_of["train"], y_of["val"]])),
        ("id", y_of["id"]),
        ("ood", y_of["ood"]),
    ]
    labels = {"train": "train + val", "id": "ID test", "ood": "OOD test"}
    ax.hist(
        [v for _, v in stacks],
        bins=bins,
        stacked=True,
        color=[COLOURS[k] for k, _ in stacks],
        label=[labels[k] for k, _ in stacks],
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel("molecules")
    ax.set_title(title)
    ax.legend()
    return fig
