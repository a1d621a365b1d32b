"""notebooks/analysis.ipynb runs from top to bottom on a runs folder and shows the
leaderboard tables, the parity grid and the ID-vs-OOD scatter; it is committed clean."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from e2e_helpers import tiny_molecules
from nbclient import NotebookClient
from paths import REPO
from report_helpers import write_runs

from oodmol.report.tables import TABLES

NOTEBOOK = REPO / "notebooks" / "analysis.ipynb"


def test_committed_notebook_has_no_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, cell.source


def test_runs_dir_is_a_papermill_parameter() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    tagged = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1 and 'os.environ.get("OODMOL_RUNS"' in tagged[0].source


def test_notebook_shows_tables_and_both_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OODMOL_RUNS", str(write_runs(tmp_path / "runs")))
    # the last section: a scikit-learn model on the tiny CSV task, Morgan bits
    csv = tmp_path / "tiny.csv"
    tiny_molecules().to_csv(csv, index=False)
    own = {"path": str(csv), "target_column": "y", "overrides": ["task.ood_size=20"]}
    monkeypatch.setenv("OODMOL_OWN_TASK", "csv")
    monkeypatch.setenv("OODMOL_OWN_OPTIONS", json.dumps(own))
    monkeypatch.setenv("OODMOL_OWN_FEATURES", "morgan")
    monkeypatch.setenv("OODMOL_DATA_DIR", str(tmp_path / "data"))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook, timeout=120, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()  # raises CellExecutionError, with the traceback, if a cell fails

    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    text = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    assert "8 runs: 2 models, 2 benchmarks" in text
    tables = [o.data["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert [table.splitlines()[0] for table in tables] == [f"## {t.title}" for t in TABLES]
    assert all("| Task | Set | mlp | rf |" in table for table in tables)
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the parity grid, then the scatter
    own = [o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(own) == 1 and "OOD RMSE" in own[0] and "OOD binned R²" in own[0]
