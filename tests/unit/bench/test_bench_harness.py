"""bench.harness on trivial fake measurements: the order in which the sides' child
processes run, the figures a child measures, and the table of medians and ratios."""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench import harness

FAKE_CHILD = """
import json, os, sys

args = sys.argv[1:]  # --one MODEL SIDE --threads N [options]
model, side = args[1], args[2]
with open(os.environ["FAKE_BENCH_LOG"], "a") as log:
    log.write(f"{model} {side} {os.environ['OMP_NUM_THREADS']} {' '.join(args[3:])}\\n")
if side == os.environ.get("FAKE_BENCH_FAIL"):
    sys.exit("this side failed")
print("a line before the figures")
print(json.dumps({"model": model, "side": side, "train_mol_s": 1.0}))
"""


@pytest.fixture
def fake_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module `fake_child` that children run: it logs its arguments and prints its
    figures (as the last line); the log's path."""
    (tmp_path / "fake_child.py").write_text(FAKE_CHILD)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("FAKE_BENCH_LOG", str(tmp_path / "log"))
    return tmp_path / "log"


@pytest.mark.slow  # starts Python processes
def test_sides_take_turns_each_in_a_child_of_its_own(fake_child: Path) -> None:
    cases = [("m", "ours"), ("m", "reference")]
    runs = harness.alternating_runs("fake_child", cases, 3, 2, ["--batches", "1"])
    # OMP_NUM_THREADS, then the arguments after `--one m <side>`
    assert fake_child.read_text().splitlines() == 3 * [
        "m ours 2 --threads 2 --batches 1",
        "m reference 2 --threads 2 --batches 1",
    ]
    figures = {case: {"model": "m", "side": case[1], "train_mol_s": 1.0} for case in cases}
    assert runs == {case: 3 * [figures[case]] for case in cases}


@pytest.mark.slow  # starts Python processes
def test_a_failed_child_stops_the_bench(fake_child: Path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_BENCH_FAIL", "reference")
    with pytest.raises(SystemExit, match=r"m reference failed:\nthis side failed"):
        harness.alternating_runs("fake_child", [("m", "ours"), ("m", "reference")], 2, 1, [])
    assert len(fake_child.read_text().splitlines()) == 2  # no second turn


def test_a_side_is_timed_per_batch_after_a_warm_up(one_thread) -> None:
    calls = []
    batches = [SimpleNamespace(z=torch.zeros(atoms)) for atoms in (100, 3, 5)]
    model = torch.nn.Linear(4, 4)
    x = torch.randn(64, 4)

    def build(args, name, side, shared):
        def train(k):
            calls.append(("train", k, model.training))
            model(x).square().sum().backward()

        def infer(k):
            calls.append(("infer", k, model.training, torch.is_grad_enabled()))

        return harness.Side(model, shared, train, infer=infer, figures={"mine": 1})

    bench = fake_bench(setup=lambda args, name: batches, build=build)
    args = argparse.Namespace(batches=2, batch_size=8)
    ours = harness.measure(bench, args, "m", "ours")
    trained = [("train", k, True) for k in range(3)]
    assert calls[:6] == [*trained, *[("infer", k, False, False) for k in range(3)]]
    assert calls[6:] == [("train", k, True) for k in (1, 2)]  # the FLOPs floor's steps
    assert ours["train_mol_s"] == pytest.approx(8e3 / ours["step_ms"])
    assert ours["floor_ms"] > 0
    assert ours["atoms_per_batch"] == 4.0  # the warm-up batch is not counted
    assert (ours["model"], ours["side"], ours["mine"]) == ("m", "ours", 1)
    calls.clear()
    reference = harness.measure(bench, args, "m", "reference")
    assert reference["floor_ms"] is None and len(calls) == 6  # no floor: not ours


def fake_bench(**fields) -> harness.Reference:
    return harness.Reference(
        **{
            "module": "fake_child",
            "doc": "A fake.",
            "models": ("m", "n"),
            "build": None,
            "columns": (
                harness.model_column(),
                harness.side_column(),
                harness.first_column("atoms/batch", "atoms_per_batch", ".0f"),
                harness.median_column("train mol/s", "train_mol_s", ".2f"),
                harness.median_column("s/step", "step_ms", ".2f", scale=1e-3),
                harness.peak_column(),
            ),
            **fields,
        }
    )


def run(side: str, rate: float, floor: float | None = None, peak: float = 10.0) -> dict:
    return {
        "side": side,
        "train_mol_s": rate,
        "wall_train_mol_s": rate / 2,
        "step_ms": 1e3 / rate,
        "floor_ms": floor,
        "peak_mb": peak,
        "atoms_per_batch": 123.0,
    }


def test_the_table_shows_medians_and_the_ratios(capsys) -> None:
    sides = ("ours", "compiled", "reference")
    bench = fake_bench(sides=lambda args: sides, clock="cpu")
    runs = {
        ("m", "ours"): [run("ours", 30, 10), run("ours", 20, 5, peak=50), run("ours", 99, 1)],
        ("m", "compiled"): [run("compiled", 60), run("compiled", 60), run("compiled", 60)],
        ("m", "reference"): [run("reference", 10), run("reference", 5), run("reference", 1)],
        ("n", "ours"): [run("ours", 8, 50)] * 3,
        ("n", "compiled"): [run("compiled", 8)] * 3,
        ("n", "reference"): [run("reference", 4)] * 3,
    }
    args = argparse.Namespace(batch_size=8, batches=2, repeats=3, threads=1)
    harness.print_table(bench, args, runs)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("csd10k_density training molecules, batch 8 (~123 atoms), 2 steps")
    assert "median of 3 runs, 1 torch thread(s)" in lines[0]
    assert lines[1:5] == [
        "| model | side | atoms/batch | train mol/s | s/step | peak MB |",
        "|---|---|---|---|---|---|",
        "| m | ours | 123 | 30.00 | 0.03 | 50 |",
        "| m | compiled | 123 | 60.00 | 0.02 | 10 |",
    ]
    # ours 30 over the reference's 5 mol/s; the reference's 200 ms step over our 5 ms floor
    assert lines[-2:] == [
        "model=m reference_ratio=6.00 wall_ratio=6.00 ceiling_ratio=40.00 compiled_ratio=12.00",
        "model=n reference_ratio=2.00 wall_ratio=2.00 ceiling_ratio=5.00 compiled_ratio=2.00",
    ]


@pytest.mark.parametrize(
    "name", ["pyg_reference", "painn_et_reference", "gotennet_reference", "mace_reference"]
)
def test_a_reference_bench_runs_its_children_as_itself(name: str) -> None:
    """Importable without its reference package, and naming its own module."""
    assert importlib.import_module(f"bench.{name}").BENCH.module == f"bench.{name}"
