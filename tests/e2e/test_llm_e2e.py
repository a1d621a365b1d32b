"""`oodmol llm` end to end on the tiny CSV task: against the scripted chat completions
server (answers, an unparseable answer, a failing request asked again by the next run, a
killed run resumed) and scored by evaluate.py; and with a tiny local causal LM."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import REPO, TinyTask, hand_metrics, load_tiny_split
from hydra.utils import instantiate
from llm_helpers import QUESTION, StubServer, save_tiny_causal_lm, stub_server

from oodmol import cli
from oodmol.cli.llm import main
from oodmol.config import compose_config
from oodmol.data.subsets import subset
from oodmol.llm.parse import first_number


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    task = TinyTask.create(tmp_path_factory.mktemp("llm"), workers=1)
    data, split = load_tiny_split(task)
    yield task, data, split
    task.close()


def _args(task: TinyTask, out: Path, *extra: str) -> list[str]:
    return [
        *task.task_args(),
        "split=ood",
        f"paths.data_dir={task.data_dir}",
        "prompt.units=log units",
        "prompt.description=Crippen octanol/water partition coefficient",
        f"out={out}",
        "progress=false",
        *extra,
    ]


def _value(smiles: str) -> float:
    return round(len(smiles) / 10, 4)


def _records(out: Path) -> list[dict]:
    lines = out.with_name(out.stem + ".answers.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[1:]]


def _counts(molecules: int, predicted: int, unparseable: int, failed: int) -> dict:
    unanswered = molecules - predicted - unparseable
    return {
        "molecules": molecules,
        "predicted": predicted,
        "unparseable": unparseable,
        "failed": failed,
        "unanswered": unanswered,
    }


@pytest.mark.slow
def test_openai_backend_end_to_end_through_evaluate(tiny, tmp_path: Path) -> None:
    task, data, split = tiny
    smiles_of = dict(zip(data.table.mol_id.tolist(), data.table.smiles.tolist(), strict=True))
    ood_ids, id_ids = split.sets["ood"].tolist(), split.sets["id"].tolist()
    unsure, down = smiles_of[ood_ids[0]], smiles_of[id_ids[1]]
    stub = StubServer(
        default=lambda s: f"The value is {_value(s):.4f} log units.",
        script={unsure: [("answer", "no idea")], down: [("status", 500)]},
    )
    out = tmp_path / "llm.csv"
    with stub_server(stub):
        openai = ["backend=openai", "openai.model=tiny", f"openai.base_url={stub.url}"]
        args = _args(task, out, *openai, "openai.backoff_s=0", "openai.max_retries=1")
        assert main(args) == 1  # one request failed twice
        summary = json.loads((tmp_path / "llm.summary.json").read_text())
        n_id, n_ood = len(id_ids), len(ood_ids)
        assert summary["counts"] == {
            "id": _counts(n_id, predicted=n_id - 1, unparseable=0, failed=1),
            "ood": _counts(n_ood, predicted=n_ood - 1, unparseable=1, failed=0),
        }
        assert summary["unparseable"] == [{"mol_id": ood_ids[0], "set": "ood", "answer": "no idea"}]
        assert stub.asked[down] == 2

        stub.script[down] = [("answer", "0.5")]  # the server is back
        asked_before = len(stub.requests)
        assert main(args) == 0
        assert len(stub.requests) == asked_before + 1  # only the failed molecule again
        first = pd.read_csv(out)

        answers = out.with_name("llm.answers.jsonl")
        lines = answers.read_text().splitlines(keepends=True)
        answers.write_text("".join(lines[:4]) + lines[4][:10])  # killed after 3 answers
        asked_before = len(stub.requests)
        assert main(args) == 0
        assert len(stub.requests) == asked_before + (n_id + n_ood - 3)
        pd.testing.assert_frame_equal(pd.read_csv(out), first)

        assert main([*args[:-1], "shots=1", "progress=false"]) == 2  # other settings
        other = _args(task, tmp_path / "x.csv", "backend=openai", "openai.model=missing")
        assert main([*other, f"openai.base_url={stub.url}"]) == 2  # HTTP 404

    assert list(first.columns) == ["mol_id", "smiles", "set", "y_pred"]
    assert len(first) == n_id + n_ood - 1
    np.testing.assert_allclose(
        first["y_pred"], [0.5 if s == down else _value(s) for s in first["smiles"]]
    )
    for record in _records(out):
        assert record["value"] == first_number(record["answer"])

    run_dir = tmp_path / "eval"
    proc = subprocess.run(
        [
            sys.executable,
            "evaluate.py",
            *task.task_args(name=False),
            "split=ood",
            f"predictions={out}",
            "model_name=stub-llm",
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=REPO,
        env=task.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["model"] == "stub-llm"
    assert "partial" in metrics["flags"]
    assert metrics["coverage"]["missing_ood"]["count"] == 1  # the unparseable answer
    assert metrics["coverage"]["missing_id"]["count"] == 0  # evaluate.py's split, too
    for name in ("id", "ood"):
        rows = first[first["set"] == name]
        truth = data.y[data.table.rows_of(rows["mol_id"].to_numpy())]
        expected = hand_metrics(truth, rows["y_pred"].to_numpy())
        assert metrics[name]["n"] == expected["n"]
        assert metrics[name]["rmse"] == pytest.approx(expected["rmse"], rel=1e-9)


@pytest.mark.slow
def test_hf_backend_end_to_end_on_the_split_subset(tiny, tmp_path: Path) -> None:
    """`oodmol llm` through the `oodmol` command with a tiny local model, few-shot,
    on train.py's `max_molecules` subset of each test set."""
    task, _, split = tiny
    model = save_tiny_causal_lm(tmp_path / "lm")
    out = tmp_path / "hf.csv"
    extra = ["backend=hf", f"hf.model={model}", "hf.batch_size=2", "hf.device=cpu"]
    args = _args(task, out, *extra, "max_molecules=3", "shots=2", "max_new_tokens=6")
    assert cli.main(["llm", *args]) == 0
    records = _records(out)
    splitter = instantiate(compose_config("data", [*task.task_args(), "split=ood"]).split)
    expected = {s: subset(split.sets[s], s, 3, splitter).tolist() for s in ("id", "ood")}
    assert {s: sorted(r["mol_id"] for r in records if r["set"] == s) for s in expected} == expected
    parsed = [r for r in records if r["value"] is not None]
    predictions = pd.read_csv(out)
    assert sorted(predictions["mol_id"]) == sorted(r["mol_id"] for r in parsed)
    assert cli.main(["llm", *args]) == 0  # everything answered: nothing asked again
    assert _records(out) == records


@pytest.mark.slow
def test_a_killed_run_loses_no_answer(tiny, tmp_path: Path) -> None:
    """SIGKILL part-way through: the rerun asks exactly the molecules without an answer
    on disk, and every molecule ends with one answer."""
    task, data, split = tiny
    ids = np.concatenate([split.sets["id"], split.sets["ood"]])
    n = len(ids)
    out = tmp_path / "killed.csv"
    stub = StubServer(default=lambda s: f"{_value(s):.4f}", delay_s=0.05)
    with stub_server(stub):
        openai = ["backend=openai", "openai.model=tiny", f"openai.base_url={stub.url}"]
        args = _args(task, out, *openai, "openai.concurrency=1")
        child = subprocess.Popen(
            [sys.executable, "-m", "oodmol.cli", "llm", *args],
            cwd=REPO,
            env=task.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        answers = out.with_name("killed.answers.jsonl")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if answers.exists() and len(answers.read_text().splitlines()) > 5:
                break
            time.sleep(0.02)
        child.kill()
        child.wait()
        saved = {r["smiles"] for r in _records(out)}
        assert 5 <= len(saved) < n, "the run was not killed part-way through"
        time.sleep(0.5)  # a request the child sent before it died reaches the stub first
        asked_before = len(stub.requests)
        assert main(args) == 0
        asked_again = [
            QUESTION.search(r["body"]["messages"][-1]["content"])[1]
            for r in stub.requests[asked_before:]
        ]
        assert sorted(asked_again) == sorted(
            set(data.table.smiles[data.table.rows_of(ids)]) - saved
        )
    records = _records(out)
    assert len(records) == n
    assert len({r["mol_id"] for r in records}) == n
