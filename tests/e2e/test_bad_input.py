"""The bad-input and fault campaign: every door of oodmol (train.py, evaluate.py with a
checkpoint or a predictions file, `oodmol predict`, `oodmol data`, `oodmol report`,
sweeps, the other tools, the Python API) fed the inputs users get wrong and the files an
attacker would plant.

Each case asserts what the user sees: the exit status (2: fix your input, 1: a run that
failed, 0: a correct result), a phrase of the message in the terminal's last lines, no
Python traceback, and that nothing was lost: every file that existed before the call
(the input data, a trained run's checkpoint, metrics and predictions, earlier results)
is byte for byte what it was. Planted configs carry payloads that would leave a marker
file behind if any of them ran.

Add a case whenever a door or an input appears.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import door_helpers
import numpy as np
import pandas as pd
import pytest
import torch
from door_helpers import Doors, environment, real_process
from e2e_helpers import MLP, QUIET, REPO, RF, TinyTask

pytestmark = pytest.mark.slow
TRAIN, EVALUATE = str(REPO / "train.py"), str(REPO / "evaluate.py")  # run from anywhere


@dataclass
class World:
    """A user's folder: the tiny task, one trained run, a folder of results."""

    root: Path
    task: TinyTask
    doors: Doors
    run: Path  # a finished run folder of the tiny task (MLP on Morgan bits)
    marker: Path  # any planted payload that ran would create this file
    notes: dict = field(default_factory=dict)

    @property
    def checkpoint(self) -> Path:
        return self.run / "checkpoints" / "best.ckpt"

    def case_dir(self, name: str) -> Path:
        folder = self.root / "cases" / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def snapshot(self) -> dict[str, str]:
        """Every file that a call must leave as it was, by content."""
        files = {}
        for top in (self.task.csv.parent,):
            for path in sorted(top.rglob("*")):
                relative = path.relative_to(top)
                if not path.is_file() or _scratch(relative):
                    continue
                files[str(relative)] = hashlib.sha256(path.read_bytes()).hexdigest()
        return files


def _scratch(relative: Path) -> bool:
    """Where a call may write: Hydra's own output folders of evaluate and predict, logs,
    caches that are rebuilt when damaged, and each case's own output files."""
    parts = relative.parts
    return (
        parts[:3] in (("project", "runs", "evaluate"), ("project", "runs", "predict"))
        or parts[0] == "data"
        or relative.suffix in (".lock", ".log")
        or (parts[0] == "cases" and "out" in relative.name)
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("doors")
    task = TinyTask.create(root)
    doors = Doors(environment(root, task.data_dir))
    run = root / "run"
    trained = doors.run([TRAIN, *task.task_args(), *QUIET, *MLP, f"hydra.run.dir={run}"])
    assert trained.returncode == 0, trained.shown()
    world = World(root, task, doors, run, root / "PAYLOAD_RAN")
    yield world
    doors.close()
    task.close()


# --- the cases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One bad input at one door: the command (built from the world), what to write
    first, and what the user must see."""

    name: str
    door: str
    argv: Callable[[World, Path], list[str]]
    code: int
    phrase: str
    setup: Callable[[World, Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)  # beside the world's environment


def train(*args: str) -> Callable[[World, Path], list[str]]:
    return lambda w, d: [TRAIN, *w.task.task_args(), *QUIET, *MLP, *args]


def train_at(*args: str) -> Callable[[World, Path], list[str]]:
    """train.py of the tiny task into the case's own folder."""
    return lambda w, d: [*train(*args)(w, d), f"hydra.run.dir={d / 'run'}"]


def train_csv(name: str, *args: str) -> Callable[[World, Path], list[str]]:
    """train.py on the case's own CSV file `name` (target column y)."""
    return lambda w, d: [
        TRAIN,
        "task=csv",
        f"task.path={d / name}",
        "task.target_column=y",
        *QUIET,
        *MLP,
        f"hydra.run.dir={d / 'run'}",
        *args,
    ]


def write(name: str, content: str | bytes) -> Callable[[World, Path], None]:
    def setup(w: World, d: Path) -> None:
        path = d / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")

    return setup


def tiny_rows(w: World, n: int | None = None) -> pd.DataFrame:
    return w.task.molecules if n is None else w.task.molecules.head(n)


def write_frame(name: str, make: Callable[[World], pd.DataFrame], **csv) -> Callable:
    def setup(w: World, d: Path) -> None:
        make(w).to_csv(d / name, index=False, **csv)

    return setup


GOOD_CSV = lambda w: tiny_rows(w)  # noqa: E731


def non_utf8(w: World) -> bytes:
    text = w.task.csv.read_text()
    lines = text.splitlines()
    lines[5] = lines[5].replace("c1", "c1", 1) + "\xe9"
    return "\n".join(lines).encode("latin-1")


OVERRIDES = [
    ("typo_key", "trainer.max_epoch=3", "did you mean trainer.max_epochs?"),
    ("typo_nested_key", "model.module.backbone.hiden=[4]", "model.module.backbone.hidden?"),
    ("unknown_model", "model=mlpp", "there is no model 'mlpp'; did you mean mlp"),
    ("unknown_split", "split=oood", "there is no split 'oood'"),
    ("unknown_launcher", "hydra/launcher=nope", "there is no hydra/launcher 'nope'"),
    ("seed_text", "seed=abc", "seed must be a whole number"),
    ("seed_negative", "seed=-1", "seed must be a whole number ≥ 0"),
    ("seed_fraction", "seed=1.5", "seed must be a whole number"),
    ("threads_negative", "threads=-2", "threads must be a whole number ≥ 1"),
    ("threads_zero", "threads=0", "threads must be a whole number ≥ 1"),
    ("max_molecules_zero", "max_molecules=0", "max_molecules must be a whole number ≥ 1"),
    ("max_molecules_text", "max_molecules=abc", "max_molecules must be a whole number"),
    ("epochs_zero", "model.max_epochs=0", "model.max_epochs must be a whole number ≥ 1"),
    ("batch_zero", "model.batch_size=0", "model.batch_size must be a whole number ≥ 1"),
    ("resume_word", "resume=maybe", "resume must be true or false"),
    ("unparseable", "model.module.backbone.hidden=[4", "not a valid override"),
    ("workers_negative", "num_workers=-1", "num_workers must be a whole number ≥ 0"),
    ("data_on_device_word", "data_on_device=maybe", "data_on_device must be auto, true or false"),
]

CASES: list[Case] = [
    Case(f"train_{name}", "train.py", train(arg), 2, phrase) for name, arg, phrase in OVERRIDES
]
# a featuriser's settings, refused where it is built, before any molecule is read
PHYSICS = ("baseline=physics", "+task.physics_estimate=dipole")
CASES += [
    Case(
        "train_physics_version",
        "train.py",
        train(*PHYSICS, "baseline.featurizer.estimates_version=1"),
        2,
        "baseline.featurizer.estimates_version=1: this oodmol computes version",
    ),
    Case(
        "train_physics_solvent",
        "train.py",
        train(*PHYSICS, "baseline.featurizer.solvents=[hexane]"),
        2,
        "baseline.featurizer.solvents=['hexane']: the estimates know water and octanol",
    ),
    Case(
        "train_baseline_without_estimate",
        "train.py",
        train("baseline=physics"),  # the CSV task names no physics_estimate
        2,
        "baseline: this task names no column that estimates its property: baseline=physics",
    ),
    Case(
        "train_baseline_column",
        "train.py",
        train("baseline=physics_descriptors", "baseline.column=[log_p,MolLgP]"),
        2,
        "baseline.column=['log_p', 'MolLgP']: MolLgP is not a column of descriptors+physics "
        "(did you mean MolLogP",
    ),
    Case(
        "train_baseline_fit",
        "train.py",
        train(*PHYSICS, "baseline.fit=cubic"),
        2,
        "baseline.fit=cubic: not a way to fit the baseline (use one of",
    ),
    Case(
        "train_weighting_exponent",
        "train.py",
        train("weighting=tails", "weighting.exponent=-1"),
        2,
        "weighting.exponent=-1: the inverse-density weights' exponent is a positive number",
    ),
]

# files a user hands to train.py as a CSV task
HEADER_ONLY = "smiles,y\n"
CASES += [
    Case(
        "train_csv_missing_path",
        "train.py",
        lambda w, d: [*train_csv("x.csv")(w, d)[:2], "task.target_column=y", *QUIET, *MLP],
        2,
        "task.path=... is required",
    ),
    Case(
        "train_csv_no_such_file", "train.py", train_csv("absent.csv"), 2, "absent.csv: no such file"
    ),
    Case("train_csv_empty", "train.py", train_csv("t.csv"), 2, "is empty", write("t.csv", "")),
    Case(
        "train_csv_header_only",
        "train.py",
        train_csv("t.csv"),
        2,
        "no molecule of data set",
        write("t.csv", HEADER_ONLY),
    ),
    Case(
        "train_csv_not_utf8",
        "train.py",
        train_csv("t.csv"),
        2,
        "is not UTF-8",
        lambda w, d: (d / "t.csv").write_bytes(non_utf8(w)),
    ),
    Case(
        "train_csv_semicolons",
        "train.py",
        train_csv("t.csv"),
        2,
        "semicolon-delimited",
        write_frame("t.csv", GOOD_CSV, sep=";"),
    ),
    Case(
        "train_csv_tabs",
        "train.py",
        train_csv("t.csv"),
        2,
        "tab-delimited",
        write_frame("t.csv", GOOD_CSV, sep="\t"),
    ),
    Case(
        "train_csv_no_target_column",
        "train.py",
        train_csv("t.csv"),
        2,
        "no column 'y'",
        write_frame("t.csv", lambda w: GOOD_CSV(w).rename(columns={"y": "logp"})),
    ),
    Case(
        "train_csv_no_smiles_column",
        "train.py",
        train_csv("t.csv"),
        2,
        "no column 'smiles'",
        write_frame("t.csv", lambda w: GOOD_CSV(w).rename(columns={"smiles": "SMILES"})),
    ),
    Case(
        "train_csv_is_a_folder",
        "train.py",
        train_csv("folder.csv"),
        2,
        "folder.csv",
        lambda w, d: (d / "folder.csv").mkdir(),
    ),
    Case(
        "train_csv_too_few_molecules",
        "train.py",
        train_csv("t.csv"),
        2,
        "sets are empty",
        write_frame("t.csv", lambda w: tiny_rows(w, 6)),
    ),
    Case(
        "train_csv_no_valid_smiles",
        "train.py",
        train_csv("t.csv"),
        2,
        "no molecule of data set",
        write("t.csv", "smiles,y\nnot_a_smiles,1\nC1CC,2\nXx,3\n"),
    ),
    Case(
        "train_csv_no_numeric_target",
        "train.py",
        train_csv("t.csv"),
        2,
        "no molecule of data set",
        write_frame("t.csv", lambda w: GOOD_CSV(w).assign(y="n/a")),
    ),
]

# checkpoints: resuming, fine-tuning, and the run folder
CASES += [
    Case(
        "train_ckpt_missing",
        "train.py",
        train_at("ckpt_path=absent.ckpt"),
        2,
        "absent.ckpt: no such file",
    ),
    Case(
        "train_ckpt_empty",
        "train.py",
        lambda w, d: train_at(f"ckpt_path={d / 'e.ckpt'}")(w, d),
        2,
        "empty",
        write("e.ckpt", b""),
    ),
    Case(
        "train_ckpt_truncated",
        "train.py",
        lambda w, d: train_at(f"ckpt_path={d / 't.ckpt'}")(w, d),
        2,
        "cannot be read",
        lambda w, d: (d / "t.ckpt").write_bytes(w.checkpoint.read_bytes()[:5000]),
    ),
    Case(
        "train_ckpt_is_csv",
        "train.py",
        lambda w, d: train_at(f"ckpt_path={w.task.csv}")(w, d),
        2,
        "cannot be read",
    ),
    Case(
        "train_ckpt_other_run",
        "train.py",
        lambda w, d: train_at(f"ckpt_path={w.checkpoint}", "seed=7")(w, d),
        2,
        "refusing to resume from it",
    ),
    Case(
        "train_init_from_missing",
        "train.py",
        train_at("model.init_from=absent.ckpt"),
        2,
        "absent.ckpt",
    ),
    Case(
        "train_init_from_truncated",
        "train.py",
        lambda w, d: train_at(f"model.init_from={d / 't.ckpt'}")(w, d),
        2,
        "t.ckpt",
        lambda w, d: (d / "t.ckpt").write_bytes(w.checkpoint.read_bytes()[:5000]),
    ),
    Case(
        "train_freeze_unknown_part",
        "train.py",
        lambda w, d: train_at(f"model.init_from={w.checkpoint}", "model.freeze=[nothing]")(w, d),
        2,
        "nothing",
    ),
    Case(
        "train_folder_of_another_run",
        "train.py",
        lambda w, d: [*train("seed=3")(w, d), f"hydra.run.dir={w.run}"],
        2,
        "holds the run of seed 0; this run is seed 3",
    ),
    Case(
        "train_uq_not_for_forest",
        "train.py",
        lambda w, d: [
            TRAIN,
            *w.task.task_args(),
            *QUIET,
            "model=rf",
            "uq=mc_dropout",
            f"hydra.run.dir={d / 'run'}",
        ],
        2,
        "does not take",
    ),
    Case(
        "train_unknown_calibrator",
        "train.py",
        train_at("uq=ensemble", "uq.calibrators=[nope]"),
        2,
        "nope",
    ),
]

# sweeps: every value is checked before the first job starts
CASES += [
    Case(
        "sweep_unknown_model",
        "sweep",
        lambda w, d: [
            TRAIN,
            "-m",
            *w.task.task_args(),
            *QUIET,
            "model=mlp,nope",
            f"hydra.sweep.dir={d / 'sweep'}",
        ],
        2,
        "there is no model 'nope'",
    ),
    Case(
        "sweep_seed_text",
        "sweep",
        lambda w, d: [
            TRAIN,
            "-m",
            *w.task.task_args(),
            *QUIET,
            "seed=0,abc",
            f"hydra.sweep.dir={d / 'sweep'}",
        ],
        2,
        "seed=abc (in the sweep's job",
    ),
]


# --- planted checkpoints ------------------------------------------------------------------
# Each payload is live: `test_payloads_are_live` builds it with Hydra's own instantiate and
# sees the marker appear. A checkpoint carrying one must be refused before anything runs.


class Shell:
    """Unpickled, runs a shell command: the payload of a planted pickle file."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def payloads(marker: Path, folder: Path) -> dict[str, dict]:
    """Targets Hydra's own blocklist lets through, each leaving `marker` when it runs:
    deserialisers of a planted pickle that runs a shell command, file writes and
    copies, an import of a planted module."""
    import pickle

    (folder / "planted.pkl").write_bytes(pickle.dumps(Shell(f"touch {marker}")))
    (folder / "planted_module.py").write_text(PLANTED_MODULE)
    pickled = str(folder / "planted.pkl")
    return {
        "torch_load": {"_target_": "torch.load", "_args_": [pickled], "weights_only": False},
        "read_pickle": {"_target_": "pandas.read_pickle", "_args_": [pickled]},
        "file_write": {"_target_": "builtins.open", "_args_": [str(marker), "w"]},
        "file_copy": {"_target_": "shutil.copyfile", "_args_": [__file__, str(marker)]},
        "touch": {"_target_": "pathlib.Path.touch", "_args_": [str(marker)]},
        "import": {"_target_": "planted_module.anything"},
    }


PLANTED_MODULE = "import pathlib, os\npathlib.Path(os.environ['PLANTED_MARKER']).touch()\n"

# where in the stored config each payload is planted
PLACES = {
    "torch_load": ("oodmol_config", "model", "module", "backbone"),
    "read_pickle": ("oodmol_config", "model", "featurizer"),
    "file_write": ("oodmol_config", "task", "source"),
    "file_copy": ("oodmol_config", "split"),
    "touch": ("oodmol_config", "model", "module", "optimizer"),
    "import": ("oodmol_config", "model", "features"),
}


def planted_checkpoint(kind: str) -> Callable[[World, Path], None]:
    def setup(w: World, d: Path) -> None:
        checkpoint = torch.load(w.checkpoint, map_location="cpu", weights_only=True)
        if kind in PLACES:
            *parents, last = PLACES[kind]
            node = checkpoint
            for key in parents:
                node = node[key]
            node[last] = payloads(w.marker, d)[kind]
        elif kind == "interpolation":
            checkpoint["oodmol_config"]["model"]["name"] = "${oc.env:HOME}"
        elif kind == "statistics":
            checkpoint["oodmol_statistics"]["backbone.in_dim"] = payloads(w.marker, d)["torch_load"]
        elif kind == "in_a_list":
            backbone = checkpoint["oodmol_config"]["model"]["module"]["backbone"]
            backbone["hidden"] = [payloads(w.marker, d)["torch_load"]]
        elif kind == "uq":
            checkpoint["oodmol_config"]["uq"]["estimator"] = payloads(w.marker, d)["touch"]
        elif kind == "not_plain":
            checkpoint["oodmol_config"]["model"]["module"]["weird"] = torch.zeros(2)
        torch.save(checkpoint, d / "planted.ckpt")

    return setup


PLANTED = [*PLACES, "interpolation", "statistics", "in_a_list", "uq", "not_plain"]
PLANTED_PHRASE = {
    "interpolation": "holds an interpolation",
    "statistics": "is not a value oodmol stores",
    "not_plain": "not a plain value",
}


def evaluate_ckpt(path: Callable[[World, Path], Path], *args: str) -> Callable:
    return lambda w, d: [EVALUATE, f"ckpt_path={path(w, d)}", "progress=false", *args]


def predict_ckpt(path: Callable[[World, Path], Path], *args: str) -> Callable:
    return lambda w, d: [
        "oodmol",
        "predict",
        f"ckpt_path={path(w, d)}",
        f"input={w.task.csv}",
        f"out={d / 'out.csv'}",
        "progress=false",
        *args,
    ]


PLANTED_FILE = lambda w, d: d / "planted.ckpt"  # noqa: E731
for kind in PLANTED:
    phrase = PLANTED_PHRASE.get(kind, "never build")
    CASES += [
        Case(
            f"evaluate_planted_{kind}",
            "evaluate.py (checkpoint)",
            evaluate_ckpt(PLANTED_FILE),
            2,
            phrase,
            planted_checkpoint(kind),
        ),
        Case(
            f"predict_planted_{kind}",
            "oodmol predict",
            predict_ckpt(PLANTED_FILE),
            2,
            phrase,
            planted_checkpoint(kind),
        ),
    ]


def torch_file(content: Callable[[World], object]) -> Callable[[World, Path], None]:
    return lambda w, d: torch.save(content(w), d / "f.ckpt")


class NotAllowed:
    """A class weights-only loading will not rebuild."""


BAD_CHECKPOINTS = [
    ("missing", lambda w, d: d / "absent.ckpt", None, "absent.ckpt: no such file"),
    ("empty", lambda w, d: d / "f.ckpt", write("f.ckpt", b""), "is empty (0 bytes)"),
    (
        "truncated",
        lambda w, d: d / "f.ckpt",
        lambda w, d: (d / "f.ckpt").write_bytes(w.checkpoint.read_bytes()[:5000]),
        "cannot be read",
    ),
    ("text", lambda w, d: w.task.csv, None, "cannot be read as a checkpoint"),
    ("folder", lambda w, d: d, None, "is a folder"),
    (
        "foreign",
        lambda w, d: d / "f.ckpt",
        torch_file(lambda w: {"w": torch.zeros(3)}),
        "not a checkpoint written by oodmol",
    ),
    (
        "pickled_object",
        lambda w, d: d / "f.ckpt",
        torch_file(lambda w: {"x": NotAllowed()}),
        "only code can rebuild",
    ),
    ("a_list", lambda w, d: d / "f.ckpt", torch_file(lambda w: [1, 2]), "not a checkpoint"),
]
for kind, path, setup, phrase in BAD_CHECKPOINTS:
    CASES += [
        Case(
            f"evaluate_ckpt_{kind}",
            "evaluate.py (checkpoint)",
            evaluate_ckpt(path),
            2,
            phrase,
            setup,
        ),
        Case(f"predict_ckpt_{kind}", "oodmol predict", predict_ckpt(path), 2, phrase, setup),
    ]

CASES += [
    Case(
        "evaluate_other_task",
        "evaluate.py (checkpoint)",
        evaluate_ckpt(lambda w, d: w.checkpoint, "task=lipophilicity", "split=ood"),
        2,
        "allow_other_task=true",
    ),
    Case(
        "evaluate_both_inputs",
        "evaluate.py (checkpoint)",
        evaluate_ckpt(lambda w, d: w.checkpoint, f"predictions={Path('p.csv')}"),
        2,
        "give exactly one of ckpt_path",
    ),
    Case(
        "evaluate_no_input",
        "evaluate.py (checkpoint)",
        lambda w, d: [EVALUATE],
        2,
        "give exactly one of ckpt_path",
    ),
    Case(
        "evaluate_threads",
        "evaluate.py (checkpoint)",
        evaluate_ckpt(lambda w, d: w.checkpoint, "threads=-1"),
        2,
        "threads must be",
    ),
]


# --- predictions made elsewhere -----------------------------------------------------------


def good_predictions(w: World) -> pd.DataFrame:
    """The trained run's own ID and OOD predictions, as `mol_id,y_pred`."""
    frame = pd.read_csv(w.run / "predictions.csv")
    return frame[frame["set"].isin(["id", "ood"])][["mol_id", "smiles", "y_pred"]]


def evaluate_file(name: str, *args: str) -> Callable[[World, Path], list[str]]:
    return lambda w, d: [
        EVALUATE,
        *w.task.task_args(),
        "split=ood",
        f"predictions={d / name}",
        "model_name=elsewhere",
        f"hydra.run.dir={d / 'out'}",
        "progress=false",
        *args,
    ]


def predictions_with(change: Callable[[pd.DataFrame], pd.DataFrame], **csv) -> Callable:
    return write_frame("p.csv", lambda w: change(good_predictions(w)), **csv)


def cell(column: str, value: str, row: int = 0) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.astype({column: object}).reset_index(drop=True)
        frame.loc[row, column] = value
        return frame

    return change


def ids_only(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[["mol_id", "y_pred"]]


PREDICTION_FILES = [
    ("missing", None, "p.csv"),
    ("empty", write("p.csv", ""), "is empty"),
    ("header_only", write("p.csv", "mol_id,y_pred\n"), "no rows"),
    ("not_utf8", write("p.csv", "mol_id,y_pred\n1,0.5\xe9\n".encode("latin-1")), "not UTF-8"),
    ("semicolons", predictions_with(ids_only, sep=";"), "semicolon-delimited"),
    ("tabs", predictions_with(ids_only, sep="\t"), "tab-delimited"),
    (
        "no_y_pred",
        predictions_with(lambda f: f.rename(columns={"y_pred": "pred"})),
        "needs a y_pred column",
    ),
    ("no_molecule_column", predictions_with(lambda f: f[["y_pred"]]), "mol_id or smiles"),
    ("nan", predictions_with(cell("y_pred", "nan")), "is not finite"),
    ("text", predictions_with(cell("y_pred", "high")), "is not a number"),
    ("empty_cell", predictions_with(cell("y_pred", "")), "y_pred is empty"),
    ("huge", predictions_with(cell("y_pred", "1e308")), "beyond ±1e+150"),
    ("infinite", predictions_with(cell("y_pred", "inf")), "is not finite"),
    ("duplicates", predictions_with(lambda f: pd.concat([f, f.head(2)])), "more than once"),
    (
        "ids_and_smiles_disagree",
        predictions_with(lambda f: f.assign(smiles=np.roll(f["smiles"].to_numpy(), 1))),
        "not their mol_id's molecule",
    ),
    ("negative_sigma", predictions_with(lambda f: f.assign(y_std=-0.1)), "y_std"),
    ("nan_sigma", predictions_with(lambda f: f.assign(y_std=np.nan)), "y_std is empty"),
    ("no_test_molecule", write("p.csv", "mol_id,y_pred\n99999,1.0\n"), "no row predicts"),
    ("is_a_folder", lambda w, d: (d / "p.csv").mkdir(), "p.csv"),
]
CASES += [
    Case(
        f"evaluate_predictions_{kind}",
        "evaluate.py (predictions)",
        evaluate_file("p.csv"),
        2,
        phrase,
        setup,
    )
    for kind, setup, phrase in PREDICTION_FILES
]
CASES += [
    Case(
        "evaluate_predictions_without_task",
        "evaluate.py (predictions)",
        lambda w, d: [EVALUATE, f"predictions={w.task.csv}"],
        2,
        "needs task=<task>",
    ),
    # a correct result: `12.7` and `1e2` are no molecule's id, reported, not rounded
    Case(
        "evaluate_predictions_fractional_ids",
        "evaluate.py (predictions)",
        evaluate_file("p.csv"),
        0,
        "results in",
        predictions_with(
            lambda f: pd.concat(
                [ids_only(f), pd.DataFrame({"mol_id": ["12.7", "1e2"], "y_pred": [0.0, 0.0]})]
            )
        ),
    ),
]


# --- new molecules to predict -------------------------------------------------------------


def predict(name: str, *args: str) -> Callable[[World, Path], list[str]]:
    return lambda w, d: [
        "oodmol",
        "predict",
        f"ckpt_path={w.checkpoint}",
        f"input={d / name}",
        f"out={d / 'out.csv'}",
        "progress=false",
        *args,
    ]


CASES += [
    Case("predict_input_missing", "oodmol predict", predict("absent.csv"), 2, "absent.csv"),
    Case(
        "predict_input_empty",
        "oodmol predict",
        predict("in.csv"),
        2,
        "is empty",
        write("in.csv", ""),
    ),
    Case(
        "predict_input_header_only",
        "oodmol predict",
        predict("in.csv"),
        2,
        "no molecules: nothing to predict",
        write("in.csv", "smiles\n"),
    ),
    Case(
        "predict_input_not_utf8",
        "oodmol predict",
        predict("in.csv"),
        2,
        "not UTF-8",
        write("in.csv", "smiles\nCC\xe9\n".encode("latin-1")),
    ),
    Case(
        "predict_input_semicolons",
        "oodmol predict",
        predict("in.csv"),
        2,
        "semicolon-delimited",
        write("in.csv", "smiles;name\nCCO;ethanol\n"),
    ),
    Case(
        "predict_input_no_smiles_column",
        "oodmol predict",
        predict("in.csv"),
        2,
        "no column 'smiles'",
        write("in.csv", "SMILES\nCCO\n"),
    ),
    Case(
        "predict_no_out",
        "oodmol predict",
        lambda w, d: [*predict("in.csv")(w, d)[:4], "progress=false"],
        2,
        "out=... is required",
        write("in.csv", "smiles\nCCO\n"),
    ),
    Case(
        "predict_out_is_input",
        "oodmol predict",
        lambda w, d: [*predict("in.csv")(w, d), f"out={d / 'in.csv'}"],
        2,
        "would overwrite the input",
        write("in.csv", "smiles\nCCO\n"),
    ),
    Case(
        "predict_unknown_key",
        "oodmol predict",
        predict("in.csv", "smile_column=x"),
        2,
        "did you mean smiles_column?",
        write("in.csv", "smiles\nCCO\n"),
    ),
    # correct results: every row comes back, the ones that cannot be predicted say why
    Case(
        "predict_bad_rows_kept",
        "oodmol predict",
        predict("in.csv"),
        0,
        "not predicted (unparseable SMILES)",
        write("in.csv", "smiles\nCCO\nnot_smiles\nC[Si](C)(C)C\nc1ccccc1O\n"),
    ),
]


CASES += [
    # molecules that used to crash or stall the job: refused alone, every other row kept
    Case(
        "predict_huge_smiles",
        "oodmol predict",
        predict("in.csv"),
        0,
        "longer than max_smiles_length",
        write("in.csv", "smiles\nCCO\n" + "C" * 100_000 + "\nc1ccccc1O\n"),
    ),
    Case(
        "predict_huge_molecule",
        "oodmol predict",
        predict("in.csv"),
        0,
        "heavy atoms",
        write("in.csv", "smiles\nCCO\n" + "C" * 1500 + "\nc1ccccc1O\n"),
    ),
]


# --- the data tool, the leaderboard, the other tools --------------------------------------


def tool(*args: str) -> Callable[[World, Path], list[str]]:
    return lambda w, d: ["oodmol", *[a.format(d=d, w=w) for a in args]]


def metrics_file(change: Callable[[dict], None]) -> Callable[[World, Path], None]:
    def setup(w: World, d: Path) -> None:
        metrics = json.loads((w.run / "metrics.json").read_text())
        change(metrics)
        (d / "runs" / "x").mkdir(parents=True)
        (d / "runs" / "x" / "metrics.json").write_text(json.dumps(metrics))

    return setup


def member_with_predictions(w: World, d: Path, change: Callable) -> None:
    """Two ensemble members copied from the trained run, the second's predictions.csv
    changed by `change`: a members folder someone sent."""
    for k in (0, 1):
        folder = d / "members" / str(k)
        folder.mkdir(parents=True)
        metrics = json.loads((w.run / "metrics.json").read_text())
        metrics["uq"] = {"method": "ensemble", "member": k}
        (folder / "metrics.json").write_text(json.dumps(metrics))
        frame = pd.read_csv(w.run / "predictions.csv")
        (change(frame) if k else frame).to_csv(folder / "predictions.csv", index=False)


def set_metric(section: str, name: str, value: object) -> Callable[[dict], None]:
    return lambda m: m[section].__setitem__(name, value)


CASES += [
    Case("data_no_command", "oodmol data", tool("data"), 2, "give one of export"),
    Case(
        "data_unknown_command", "oodmol data", tool("data", "exprot"), 2, "unknown command 'exprot'"
    ),
    Case(
        "data_unknown_task",
        "oodmol data",
        tool("data", "export", "task=nope"),
        2,
        "there is no task 'nope'",
    ),
    Case(
        "data_unknown_featurizer",
        "oodmol data",
        tool("data", "prepare", "featurizers=[nope]"),
        2,
        "there is no featurizer 'nope'",
    ),
    Case(
        "data_unknown_key",
        "oodmol data",
        tool("data", "export", "outt=x.csv"),
        2,
        "did you mean out?",
    ),
    Case(
        "data_csv_missing",
        "oodmol data",
        tool("data", "export", "task=csv", "task.path={d}/absent.csv", "task.target_column=y"),
        2,
        "absent.csv: no such file",
    ),
    Case(
        "data_csv_tabs",
        "oodmol data",
        tool(
            "data",
            "export",
            "task=csv",
            "task.path={d}/t.csv",
            "task.target_column=y",
            "out={d}/out.csv",
        ),
        2,
        "tab-delimited",
        write_frame("t.csv", GOOD_CSV, sep="\t"),
    ),
    Case(
        "data_export_into_a_file",
        "oodmol data",
        lambda w, d: [
            "oodmol",
            "data",
            "export",
            *w.task.task_args(),
            f"out={w.task.csv}/x.csv",
            "progress=false",
        ],
        2,
        "File exists",
    ),
    Case(
        "report_no_folder",
        "oodmol report",
        tool("report", "{d}/absent", "--out", "{d}/out"),
        2,
        "no such folder",
    ),
    Case(
        "report_empty_folder",
        "oodmol report",
        tool("report", "{d}", "--out", "{d}/out"),
        2,
        "no valid metrics.json",
    ),
    Case("report_no_out", "oodmol report", tool("report", "{d}"), 2, "--out"),
    Case(
        "report_unknown_option",
        "oodmol report",
        tool("report", "{d}", "--out", "{d}/out", "--outt", "x"),
        2,
        "unrecognized arguments",
    ),
    Case(
        "report_negative_rmse",
        "oodmol report",
        tool("report", "{d}/runs", "--out", "{d}/out"),
        2,
        "no valid metrics.json",
        metrics_file(set_metric("ood", "rmse", -1.0)),
    ),
    Case(
        "report_infinite_rmse",
        "oodmol report",
        tool("report", "{d}/runs", "--out", "{d}/out"),
        2,
        "no valid metrics.json",
        metrics_file(set_metric("id", "rmse", float("inf"))),
    ),
    Case(
        "report_null_rmse",
        "oodmol report",
        tool("report", "{d}/runs", "--out", "{d}/out"),
        2,
        "no valid metrics.json",
        metrics_file(set_metric("ood", "rmse", None)),
    ),
    Case(
        "report_text_rmse",
        "oodmol report",
        tool("report", "{d}/runs", "--out", "{d}/out"),
        2,
        "no valid metrics.json",
        metrics_file(set_metric("id", "rmse", "0.1")),
    ),
    Case(
        "report_not_json",
        "oodmol report",
        tool("report", "{d}/runs", "--out", "{d}/out"),
        2,
        "no valid metrics.json",
        lambda w, d: ((d / "runs").mkdir(), (d / "runs" / "metrics.json").write_text("{not json")),
    ),
    Case("unknown_command", "oodmol", tool("trian"), 2, "unknown command 'trian'"),
    Case(
        "uq_combine_no_folder",
        "oodmol uq",
        tool("uq", "combine", "{d}/absent", "--out", "{d}/out"),
        2,
        "absent",
    ),
    Case(
        "uq_combine_empty",
        "oodmol uq",
        tool("uq", "combine", "{d}", "--out", "{d}/out"),
        2,
        "member",
    ),
    Case("uq_no_command", "oodmol uq", tool("uq"), 2, "oodmol uq"),
    Case(
        "uq_combine_member_predictions_broken",
        "oodmol uq",
        tool("uq", "combine", "{d}/members", "--out", "{d}/out"),
        2,
        "is not a finite number",
        lambda w, d: member_with_predictions(w, d, lambda f: f.assign(y_pred="high")),
    ),
    Case(
        "uq_combine_member_predictions_columns",
        "oodmol uq",
        tool("uq", "combine", "{d}/members", "--out", "{d}/out"),
        2,
        "no column ['y_true']",
        lambda w, d: member_with_predictions(w, d, lambda f: f.drop(columns="y_true")),
    ),
    Case(
        "ablation_no_runs",
        "oodmol ablation",
        tool("ablation", "learning-curve", "{d}", "--out", "{d}/out"),
        2,
        "no complete run",
    ),
    Case(
        "ablation_no_folder",
        "oodmol ablation",
        tool("ablation", "augmentation", "{d}/absent", "--out", "{d}/out"),
        2,
        "no such folder",
    ),
    Case(
        "ablation_unknown_figure",
        "oodmol ablation",
        tool("ablation", "heatmap", "{d}"),
        2,
        "unknown command 'heatmap'",
    ),
    Case("campaign_no_arguments", "oodmol campaign", tool("campaign"), 2, "oodmol campaign"),
    Case(
        "campaign_unknown_rule",
        "oodmol campaign",
        tool(
            "campaign",
            "task=csd10k_density",
            "model=rf",
            "acquisition=nope",
            "rounds=1",
            "batch=1",
            "out={d}/c",
        ),
        2,
        "nope",
    ),
    Case(
        "campaign_report_no_folder",
        "oodmol campaign-report",
        tool("campaign-report", "{d}/absent", "--out", "{d}/out"),
        2,
        "no such folder",
    ),
    Case(
        "campaign_report_empty",
        "oodmol campaign-report",
        tool("campaign-report", "{d}", "--out", "{d}/out"),
        2,
        "no recorded campaign round",
    ),
    Case(
        "reproduce_nothing_found",
        "oodmol reproduce",
        tool(
            "reproduce",
            "{d}",
            "--models",
            "rf",
            "--tasks",
            "csd10k_density",
            "--seeds",
            "0",
            "--protocols",
            "default",
        ),
        2,
        "no run of the plan found",
    ),
    Case(
        "llm_no_backend",
        "oodmol llm",
        tool("llm", "task=csd10k_density", "out={d}/o.csv"),
        2,
        "backend=... is required",
    ),
    Case(
        "llm_unknown_backend",
        "oodmol llm",
        tool("llm", "task=csd10k_density", "backend=gpt", "out={d}/o.csv"),
        2,
        "backend='gpt'",
    ),
    Case(
        "pretrain_no_corpus",
        "oodmol pretrain",
        tool("pretrain", "model=modernbert", "out={d}/p"),
        2,
        "corpus=... is required",
    ),
    Case(
        "pretrain_not_a_transformer",
        "oodmol pretrain",
        tool("pretrain", "model=mlp", "corpus=[csd10k_density]", "out={d}/p"),
        2,
        "no pretraining objective",
    ),
]


# --- received files: what their values do ------------------------------------------------
# A checkpoint or a saved task rebuilt from this installation's configs: values that would
# write outside their folder, become a path, loosen a limit or exhaust memory are refused,
# and the write they aim at (the marker file) never happens. OODMOL_SOURCE_DIR is unset
# (a user's normal setting), so a data source's file would be downloaded.

OFFLINE_UNSET = {"OODMOL_SOURCE_DIR": ""}


def installed_task(name: str) -> dict:
    """A BOOM task's config as train.py stores it in a checkpoint (resolved)."""
    from omegaconf import OmegaConf

    from oodmol.config import compose_config

    return OmegaConf.to_container(compose_config("train", [f"task={name}"]).task, resolve=True)


def planted_source(marker: Path, relpath: str) -> dict:
    """csd10k_density with its first file described anew: a `data:` URL whose bytes match
    the checksum given, to be written at `relpath` (the marker, absolute or reached by
    `..` from the data folder)."""
    payload = b"smiles,density\nC,1.0\n"
    task = installed_task("csd10k_density")
    task["source"]["files"][0] = {
        "relpath": relpath,
        "url": "data:text/plain;base64,c21pbGVzLGRlbnNpdHkKQywxLjAK",
        "checksum": "sha256:" + hashlib.sha256(payload).hexdigest(),
    }
    return task


def received_checkpoint(change: Callable[[dict, World], None]) -> Callable[[World, Path], None]:
    """The world's checkpoint with its stored config changed by `change`."""

    def setup(w: World, d: Path) -> None:
        checkpoint = torch.load(w.checkpoint, map_location="cpu", weights_only=True)
        change(checkpoint["oodmol_config"], w)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(50_000)  # torch.save recurses into a planted depth
        try:
            torch.save(checkpoint, d / "received.ckpt")
        finally:
            sys.setrecursionlimit(limit)

    return setup


def set_in(*keys: str, value: Callable[[World], object]) -> Callable[[dict, World], None]:
    def change(config: dict, w: World) -> None:
        node = config
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value(w)

    return change


def nested(depth: int) -> list:
    top: list = []
    node = top
    for _ in range(depth):
        node.append([])
        node = node[0]
    return top


RECEIVED = lambda w, d: d / "received.ckpt"  # noqa: E731
ESCAPE_BY_DOTS = "../../PAYLOAD_RAN"  # from <data>/raw to the world's marker
RECEIVED_CASES = [
    (
        "source_file_absolute",
        set_in("task", value=lambda w: planted_source(w.marker, str(w.marker))),
        "never a received file's",
    ),
    (
        "source_file_dots",
        set_in("task", value=lambda w: planted_source(w.marker, ESCAPE_BY_DOTS)),
        "never a received file's",
    ),
    ("task_name_dots", set_in("task", "name", value=lambda w: "../../escape"), "a name must be"),
    ("model_name_slash", set_in("model", "name", value=lambda w: "/tmp/x"), "a name must be"),
    (
        "limit_loosened",
        set_in("task", "limits", "max_atoms", value=lambda w: 10**9),
        "looser than this installation's 1000",
    ),
    (
        "time_limit_removed",
        set_in("task", "limits", "time_limit", value=lambda w: None),
        "looser than this installation's 60",
    ),
    (
        "unknown_setting",
        set_in("model", "module", "backbone", "depth", value=lambda w: 3),
        "is not a setting of this installation's configs",
    ),
    (
        "wrong_type",
        set_in("model", "module", "backbone", "hidden", value=lambda w: "wide"),
        "the configs hold a list here",
    ),
    (
        "huge_list",
        set_in("model", "module", "backbone", "hidden", value=lambda w: list(range(3_000_000))),
        "more than 250,000 pickled values",
    ),
    (
        "deep_nesting",
        set_in("model", "module", "backbone", "hidden", value=lambda w: nested(5000)),
        "nested more than",
    ),
    ("seed_negative", set_in("seed", value=lambda w: -5), "seed must be a whole number ≥ 0"),
]


def received_baseline(fit: dict) -> Callable[[World, Path], None]:
    """The world's checkpoint carrying a Δ-learning fit `fit` (a planted one)."""

    def setup(w: World, d: Path) -> None:
        checkpoint = torch.load(w.checkpoint, map_location="cpu", weights_only=True)
        checkpoint["oodmol_baseline"] = fit
        torch.save(checkpoint, d / "received.ckpt")

    return setup


BASELINE_FITS = {  # an older oodmol's single slope; slopes that are not numbers
    "baseline_single_slope": {"name": "physics", "intercept": 1.0, "slope": 2.0},
    "baseline_slopes_text": {"name": "physics", "intercept": 1.0, "slopes": ["2.0"]},
    "baseline_slopes_nan": {"name": "physics", "intercept": 1.0, "slopes": [float("nan")]},
}
for kind, fit in BASELINE_FITS.items():
    CASES += [
        Case(
            f"evaluate_received_{kind}",
            "evaluate.py (checkpoint)",
            evaluate_ckpt(RECEIVED),
            2,
            "its baseline's fit is not an intercept and a list of slopes",
            received_baseline(fit),
            OFFLINE_UNSET,
        )
    ]
for kind, change, phrase in RECEIVED_CASES:
    CASES += [
        Case(
            f"evaluate_received_{kind}",
            "evaluate.py (checkpoint)",
            evaluate_ckpt(RECEIVED),
            2,
            phrase,
            received_checkpoint(change),
            OFFLINE_UNSET,
        ),
        Case(
            f"predict_received_{kind}",
            "oodmol predict",
            predict_ckpt(RECEIVED),
            2,
            phrase,
            received_checkpoint(change),
            OFFLINE_UNSET,
        ),
    ]


def deep_record(w: World, d: Path) -> None:
    (d / "runs" / "x").mkdir(parents=True)
    (d / "runs" / "x" / "metrics.json").write_text("[" * 100_000 + "]" * 100_000)


CASES += [
    Case(
        "report_deep_record",
        "oodmol report",
        tool("report", "{d}/runs", "--out", "{d}/out"),
        2,
        "no valid metrics.json",
        deep_record,
    ),
]


# --- the campaign's run ------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_ends_in_one_message(world: World, case: Case) -> None:
    folder = world.case_dir(case.name)
    if case.setup is not None:
        case.setup(world, folder)
    before = world.snapshot()
    env = {"PYTHONPATH": str(folder), "PLANTED_MARKER": str(world.marker), **case.env}
    outcome = world.doors.run(case.argv(world, folder), cwd=folder, env=env)
    assert outcome.returncode == case.code, outcome.shown()
    assert "Traceback" not in outcome.stdout + outcome.stderr, outcome.shown()
    assert case.phrase in outcome.last_lines, outcome.shown()
    assert not world.marker.exists(), f"a planted payload ran\n{outcome.shown()}"
    after = world.snapshot()
    changed = sorted(k for k in before if before[k] != after.get(k))
    assert not changed, f"files changed or lost: {changed}\n{outcome.shown()}"


def test_payloads_are_live(world: World, tmp_path: Path) -> None:
    """Each planted payload does run when Hydra builds it without oodmol's check (its
    own blocklist lets these through): the refusals above are what stops them."""
    import subprocess
    import sys

    marker = tmp_path / "ran"
    for kind, payload in payloads(marker, tmp_path).items():
        marker.unlink(missing_ok=True)
        (tmp_path / "payload.json").write_text(json.dumps(payload))
        code = (
            "import json; from hydra.utils import instantiate; "
            "instantiate(json.load(open('payload.json')))"
        )
        env = {**os.environ, "PYTHONPATH": str(tmp_path), "PLANTED_MARKER": str(marker)}
        subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, check=False, capture_output=True
        )
        assert marker.exists(), f"the {kind} payload did not run under plain instantiate"


REAL = ["train_typo_key", "evaluate_planted_torch_load", "predict_ckpt_truncated", "report_no_out"]


@pytest.mark.parametrize("name", REAL)
def test_doors_equal_real_processes(world: World, name: str) -> None:
    """The forked doors show what a fresh interpreter shows (`oodmol` through its
    console script's module)."""
    case = next(c for c in CASES if c.name == name)
    folder = world.case_dir(f"real_{name}")
    if case.setup is not None:
        case.setup(world, folder)
    argv = case.argv(world, folder)
    env = {**world.doors.env, "PYTHONPATH": str(folder), "PLANTED_MARKER": str(world.marker)}
    real = real_process(argv, env, cwd=folder)
    forked = world.doors.run(argv, cwd=folder, env=env)
    assert (real.returncode, real.last_lines) == (forked.returncode, forked.last_lines)


def test_doors_on_a_cuda_machine_run_each_call_in_a_fresh_interpreter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where a CUDA device exists a fork of the zygote cannot use it: no zygote starts,
    and each call is a child of the test's own process, as a fresh interpreter is."""
    monkeypatch.setattr(door_helpers, "FORKS_LOSE_THE_DEVICE", True)
    doors = Doors()
    script = tmp_path / "parent.py"
    script.write_text("import os\nprint(os.getppid())\n")
    outcome = doors.run([str(script)], cwd=tmp_path, env=dict(os.environ), timeout=60)
    doors.close()
    assert doors.process is None
    assert (outcome.returncode, outcome.stdout.strip()) == (0, str(os.getpid())), outcome.shown()


def test_a_forked_door_ends_when_its_command_does(world: World, tmp_path: Path) -> None:
    """A process pool left open ends with the call, as in a fresh interpreter (whose end
    runs the threads' exit hooks first: joblib's launcher leaves such a pool)."""
    script = tmp_path / "open_pool.py"
    script.write_text(
        "import sys\n"
        "from concurrent.futures import ProcessPoolExecutor\n"
        "sys.kept_pool = ProcessPoolExecutor(1)  # held past the script, as loky's is\n"
        "print(sys.kept_pool.submit(abs, -7).result())\n"
    )
    outcome = world.doors.run([str(script)], cwd=tmp_path, timeout=60)
    assert (outcome.returncode, outcome.stdout.strip()) == (0, "7"), outcome.shown()


# --- the Python API -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def benchmark_task(world: World):
    from oodmol import benchmark

    os.environ["OODMOL_DATA_DIR"] = str(world.task.data_dir)
    return benchmark.load(
        "csv", path=world.task.csv, target_column="y", overrides=["task.ood_size=20"]
    )


def api_predictions(task, change: Callable[[dict], dict] | None = None) -> dict:
    values = {s: task.test[s]["target"].to_numpy() + 0.1 for s in ("id", "ood")}
    return change(values) if change else values


API_CASES = [
    (
        "wrong_length",
        lambda t: api_predictions(t, lambda v: {**v, "id": v["id"][:-1]}),
        "molecules",
    ),
    (
        "strings",
        lambda t: api_predictions(t, lambda v: {**v, "id": ["high"] * len(v["id"])}),
        "must be numbers",
    ),
    ("none", lambda t: api_predictions(t, lambda v: {**v, "ood": None}), "not a NoneType"),
    ("scalar", lambda t: api_predictions(t, lambda v: {**v, "ood": 1.0}), "not a float"),
    ("a_list_of_sets", lambda t: list(api_predictions(t).values()), "must be a dict of sets"),
    ("nan", lambda t: api_predictions(t, lambda v: {**v, "id": v["id"] * np.nan}), "not finite"),
    ("huge", lambda t: api_predictions(t, lambda v: {**v, "id": v["id"] * 0 + 1e308}), "beyond"),
    ("unknown_set", lambda t: {**api_predictions(t), "test": [1.0]}, "unknown ['test']"),
    ("missing_set", lambda t: {"id": api_predictions(t)["id"]}, "missing ['ood']"),
    (
        "frame_without_columns",
        lambda t: api_predictions(t, lambda v: {**v, "id": pd.DataFrame({"a": v["id"]})}),
        "needs columns 'mol_id'",
    ),
    (
        "dict_with_fractional_ids",
        lambda t: api_predictions(t, lambda v: {**v, "id": {12.7: 1.0}}),
        "whole-number mol_ids",
    ),
    (
        "dict_missing_molecules",
        lambda t: api_predictions(
            t,
            lambda v: {
                **v,
                "id": dict(zip(t.test["id"]["mol_id"][:-1], v["id"][:-1], strict=True)),
            },
        ),
        "have no prediction",
    ),
    (
        "series_repeated_ids",
        lambda t: api_predictions(
            t,
            lambda v: {
                **v,
                "id": pd.Series([1.0, 2.0], index=[t.test["id"]["mol_id"].iloc[0]] * 2),
            },
        ),
        "more than one",
    ),
    (
        "two_dimensional",
        lambda t: api_predictions(t, lambda v: {**v, "id": np.ones((len(v["id"]), 2))}),
        "one value per molecule",
    ),
]


@pytest.mark.parametrize(("name", "make", "phrase"), API_CASES, ids=[c[0] for c in API_CASES])
def test_api_refuses_in_one_message(benchmark_task, name, make, phrase) -> None:
    from oodmol.errors import UserError

    with pytest.raises(UserError) as refused:
        benchmark_task.evaluate(make(benchmark_task))
    assert phrase in str(refused.value)
    assert "\n" not in str(refused.value)


def test_api_takes_a_dict_keyed_by_mol_id(benchmark_task) -> None:
    """A correct result: a plain dict {mol_id: value} scores as the aligned array does."""
    aligned = api_predictions(benchmark_task)
    keyed = {
        s: dict(zip(benchmark_task.test[s]["mol_id"].tolist(), aligned[s].tolist(), strict=True))
        for s in ("id", "ood")
    }
    assert benchmark_task.evaluate(keyed)["ood"] == benchmark_task.evaluate(aligned)["ood"]


def test_api_refuses_wrong_task_and_existing_run(benchmark_task, tmp_path: Path) -> None:
    from oodmol import benchmark
    from oodmol.errors import UserError

    with pytest.raises(UserError, match="must be a BenchmarkTask"):
        benchmark.evaluate("csd10k_density", api_predictions(benchmark_task))
    benchmark_task.evaluate(api_predictions(benchmark_task), save_to=tmp_path)
    with pytest.raises(UserError, match="already holds a run"):
        benchmark_task.evaluate(api_predictions(benchmark_task), save_to=tmp_path)
    with pytest.raises(UserError, match="there is no task 'nope'"):
        benchmark.load("nope")


def test_api_saved_task_is_data(benchmark_task, world: World, tmp_path: Path) -> None:
    """A saved task someone sent is read as data: a planted target is refused unbuilt."""
    from oodmol.benchmark import BenchmarkTask
    from oodmol.errors import UserError

    folder = benchmark_task.save(tmp_path / "task")
    description = json.loads((folder / "task.json").read_text())
    description["config"]["task"]["source"] = payloads(world.marker, tmp_path)["torch_load"]
    (folder / "task.json").write_text(json.dumps(description))
    with pytest.raises(UserError, match="never build"):
        BenchmarkTask.read(folder)
    with pytest.raises(UserError, match="no such file"):
        BenchmarkTask.read(tmp_path / "absent")
    assert not world.marker.exists()


def test_a_received_task_folder_writes_nothing_outside(
    benchmark_task, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saved task whose stored task describes its data source's files anew (a path out
    of the data folder, a `data:` URL, the checksum of its own bytes) is refused when it
    is read; its features are never built, so nothing is written anywhere."""
    from oodmol.benchmark import BenchmarkTask
    from oodmol.errors import UserError

    monkeypatch.setenv("OODMOL_SOURCE_DIR", "")
    for relpath in (str(world.marker), ESCAPE_BY_DOTS):
        folder = benchmark_task.save(tmp_path / "task")
        description = json.loads((folder / "task.json").read_text())
        description["config"]["task"] = planted_source(world.marker, relpath)
        (folder / "task.json").write_text(json.dumps(description))
        with pytest.raises(UserError, match="never a received file's"):
            BenchmarkTask.read(folder).features()
        assert not world.marker.exists()
    description["config"]["task"] = installed_task("csd10k_density")
    description["config"]["task"]["limits"] = {"max_atoms": 10**9}
    (folder / "task.json").write_text(json.dumps(description))
    with pytest.raises(UserError, match="is not a setting"):  # a BOOM task's limits: its source's
        BenchmarkTask.read(folder)


def test_api_names_never_leave_their_folder(benchmark_task, tmp_path: Path) -> None:
    """A run's name becomes a folder of `save_to`: one that would climb out of it is
    refused and nothing is written."""
    from oodmol.errors import UserError

    runs = tmp_path / "runs"
    for name in ("../../escape", "/tmp/escape", "a/b", ".hidden", ""):
        with pytest.raises(UserError, match="a name must be"):
            benchmark_task.evaluate(api_predictions(benchmark_task), name=name, save_to=runs)
    assert not any(tmp_path.rglob("metrics.json"))


def test_a_planted_round_record_is_refused_before_it_reaches_an_override(world: World) -> None:
    """A campaign's acquired molecules go into the next round's split as an override: a
    round record someone edited to carry more than molecule ids is refused, and nothing
    it carries runs."""
    folder = world.case_dir("campaign_planted_round")
    campaign = [
        "oodmol", "campaign", *world.task.task_args(), *QUIET, *RF, "acquisition=greedy",
        "batch=2", f"out={folder / 'c'}",
    ]  # fmt: skip
    first = world.doors.run([*campaign, "rounds=1"], cwd=folder)
    assert first.returncode == 0, first.shown()
    record = folder / "c" / "rounds" / "0.json"
    content = json.loads(record.read_text())
    injected = "1],+callbacks.x._target_=builtins.open,+callbacks.x._args_=[" + str(world.marker)
    content["acquired"][0]["mol_id"] = injected
    record.write_text(json.dumps(content))
    second = world.doors.run([*campaign, "rounds=2"], cwd=folder)
    assert second.returncode == 2, second.shown()
    assert "is not a round record this campaign wrote" in second.last_lines
    assert "Traceback" not in second.stdout + second.stderr
    assert not world.marker.exists()
