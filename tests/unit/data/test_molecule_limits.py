"""No molecule can take a run down with it: per-molecule work runs in supervised worker
processes, where a molecule that crashes its worker or overruns its time limit is
refused with the reason and the rest go on."""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import QUIET, RF, TinyTask
from hydra.utils import instantiate
from omegaconf import OmegaConf
from rdkit import Chem

from oodmol.config import config_dir
from oodmol.data import validate as validation
from oodmol.data.dataset import load_dataset
from oodmol.data.featurize.base import FeaturizationError, Featurizer, MolInput
from oodmol.data.featurize.conformers import ConformerError
from oodmol.data.featurize.descriptors import RDKitDescriptors
from oodmol.data.featurize.fingerprints import MorganFingerprint
from oodmol.data.featurize.graph2d import Graph2D
from oodmol.data.featurize.graph3d import Graph3D
from oodmol.data.sources.csv_source import CSVSource
from oodmol.data.store import JOURNAL_KEPT, FeatureStore
from oodmol.data.table import MoleculeTable
from oodmol.data.validate import Parsed, parse_smiles, validate
from oodmol.interrupts import Interrupted
from oodmol.parallel import Refused, process_map

CRASHES = {
    "segfault": lambda: ctypes.string_at(0),
    "abort": os.abort,
    "oom_kill": lambda: os.kill(os.getpid(), signal.SIGKILL),  # as the OOM killer ends it
}
REASONS = {
    "segfault": "its worker process died of SIGSEGV",
    "abort": "its worker process died of SIGABRT",
    "oom_kill": "its worker process died of SIGKILL (out of memory?)",
}


def supervised(fn, items: list, **kwargs) -> list:
    return list(process_map(fn, items, len(items), "test", progress=False, **kwargs))


def square(x: int) -> int:
    return x * x


def pid_or_crash(x: int, crash: str = "segfault") -> int:
    if x == 7:
        faulthandler.disable()  # pytest's: its dump of this worker's stack is only noise
        CRASHES[crash]()
    return os.getpid()


def sleepy(x: int) -> int:
    if x == 3:
        time.sleep(60)
    return os.getpid()


def fails_at_five(x: int) -> int:
    if x == 5:
        raise ValueError("five is not allowed")
    return x


def unsendable(x: int) -> threading.Lock:
    return threading.Lock()  # does not pickle: the worker dies sending it back


def stopped_once(x: int, marks: Path) -> int:
    """Item 7's worker is stopped from outside (SIGTERM, as `kill` or a scheduler's
    pre-emption sends it) the first time it is on that item; `marks` remembers."""
    if x == 7 and not (marks / "stopped").exists():
        (marks / "stopped").touch()
        os.kill(os.getpid(), signal.SIGTERM)
    return x


def always_stopped(x: int) -> int:
    if x == 7:
        os.kill(os.getpid(), signal.SIGTERM)
    return x


def gone(pids: set[int]) -> bool:
    """No process of these ids is left (the workers were ended and waited for)."""
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_supervised_map_equals_map_in_order(n_jobs: int) -> None:
    items = list(range(500))
    assert supervised(square, items, n_jobs=n_jobs) == list(map(square, items))


def test_an_exception_of_fn_is_raised_at_its_place() -> None:
    seen = []
    with pytest.raises(ValueError, match="five is not allowed"):
        for result in process_map(fails_at_five, range(20), 20, "", n_jobs=2, progress=False):
            seen.append(result)
    assert seen == [0, 1, 2, 3, 4]


@pytest.mark.slow  # worker processes crash, stall and are replaced
@pytest.mark.parametrize("crash", sorted(CRASHES))
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_crashing_item_is_named_and_the_rest_come_back(crash: str, n_jobs: int) -> None:
    results = supervised(partial(pid_or_crash, crash=crash), list(range(40)), n_jobs=n_jobs)
    assert results[7] == Refused(REASONS[crash])
    pids = set(results[:7] + results[8:])
    assert all(isinstance(pid, int) and pid != os.getpid() for pid in pids)
    assert gone(pids)


@pytest.mark.slow  # worker processes crash, stall and are replaced
def test_an_item_past_its_time_limit_is_refused_and_its_worker_ended() -> None:
    results = supervised(sleepy, list(range(12)), n_jobs=2, time_limit=0.5)
    assert results[3] == Refused("time limit of 0.5 s exceeded")
    pids = set(results[:3] + results[4:])
    assert all(isinstance(pid, int) for pid in pids)
    assert gone(pids)


@pytest.mark.slow  # worker processes crash, stall and are replaced
def test_workers_that_cannot_answer_end_the_run() -> None:
    """A worker that dies outside any item is replaced, but not forever."""
    with pytest.raises(RuntimeError, match="worker processes in a row ended with no item to blame"):
        supervised(unsendable, [1, 2, 3])


@pytest.mark.slow  # worker processes crash, stall and are replaced
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_worker_stopped_from_outside_refuses_nothing(n_jobs: int, tmp_path: Path) -> None:
    """Its item is not to blame: it is computed again, by the worker that replaces it."""
    results = supervised(partial(stopped_once, marks=tmp_path), list(range(20)), n_jobs=n_jobs)
    assert (tmp_path / "stopped").exists()
    assert results == list(range(20))


@pytest.mark.slow  # worker processes crash, stall and are replaced
def test_workers_stopped_again_and_again_end_the_run() -> None:
    with pytest.raises(
        RuntimeError, match=r"no item to blame \(its worker process died of SIGTERM\)"
    ):
        supervised(always_stopped, list(range(10)), n_jobs=2)


@pytest.mark.slow  # worker processes crash, stall and are replaced
def test_a_map_left_early_leaves_no_worker() -> None:
    results = process_map(pid_or_crash, range(100), 100, "", n_jobs=2, progress=False)
    pids = {next(results) for _ in range(3)}
    results.close()
    assert gone(pids)


class Crashing(Featurizer):
    """Morgan-like output, but a segfault on one SMILES and a stall on another."""

    name = "crashing"

    def __init__(self, time_limit: float | None = None) -> None:
        self.time_limit = time_limit

    def params(self) -> dict:
        return {"time_limit": self.time_limit}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.smiles == "C[Si]":
            faulthandler.disable()
            ctypes.string_at(0)
        if mol.smiles == "CC[Si]":
            time.sleep(60)
        return {"x": np.array([len(mol.smiles)], dtype=np.float32)}


@pytest.mark.slow  # worker processes crash, stall and are replaced
def test_feature_cache_records_crashes_and_overruns_and_keeps_the_rest(tmp_path: Path) -> None:
    smiles = ["C", "C[Si]", "CC", "CC[Si]", "CCC", "CCCC"]
    table = MoleculeTable("t", np.arange(10, 16), np.array(smiles), {})
    store = FeatureStore.build_or_open(Crashing(time_limit=0.5), table, tmp_path, progress=False)
    assert store.failed == {
        11: "C[Si]: its worker process died of SIGSEGV",
        13: "CC[Si]: time limit of 0.5 s exceeded",
    }
    assert len(store) == 4
    np.testing.assert_array_equal(store.matrix([10, 12, 14, 15]).ravel(), [1, 2, 3, 4])


HUGE_SMILES = "C" * 100_000  # a SMILES like this once crashed RDKit after 260 s
LARGE_CHAIN = "C" * 1500  # short enough to read, too many heavy atoms for validation


def test_validation_refuses_an_overlong_smiles_before_rdkit_reads_it(monkeypatch) -> None:
    def unread(*args, **kwargs):
        raise AssertionError("RDKit was given the SMILES")

    monkeypatch.setattr(Chem, "MolFromSmiles", unread)
    assert parse_smiles(HUGE_SMILES).error == (
        "SMILES longer than max_smiles_length (2000 characters)"
    )


def test_validation_refuses_over_limit_molecules_quickly_and_keeps_the_rest(tmp_path) -> None:
    rows = ["CCO", HUGE_SMILES, LARGE_CHAIN, "c1ccccc1", "CCCCCCC"]
    path = tmp_path / "big.csv"
    path.write_text("smiles,y\n" + "".join(f"{s},{i}\n" for i, s in enumerate(rows)))
    source = CSVSource("big", files=[str(path)], target_columns=["y"], limits={"max_atoms": 6})
    started = time.monotonic()
    table, report = validate(source.read(tmp_path), None, progress=False, limits=source.limits)
    assert time.monotonic() - started < 5
    assert table.smiles.tolist() == ["CCO", "c1ccccc1"]
    too_long = report.findings["dropped:SMILES longer than max_smiles_length (2000 characters)"]
    assert too_long.count == 1 and too_long.examples[0].endswith("(100000 characters)'")
    too_large = report.findings["dropped:more heavy atoms than max_atoms (6)"]
    assert too_large.count == 2 and too_large.examples[0].startswith("mol 2: ")


@pytest.mark.parametrize(
    ("featurizer", "smiles", "reason"),
    [
        (RDKitDescriptors(), HUGE_SMILES, "SMILES longer than max_smiles_length (2000 characters)"),
        (RDKitDescriptors(), "C" * 301, "more heavy atoms than max_atoms (300)"),
        (MorganFingerprint(), LARGE_CHAIN, "more heavy atoms than max_atoms (1000)"),
        (Graph2D(), HUGE_SMILES, "SMILES longer than max_smiles_length (2000 characters)"),
        (Graph3D(), "C" * 200, "more atoms with hydrogens than max_atoms (500)"),  # 602 atoms
    ],
    ids=["descriptors-long", "descriptors-large", "morgan-large", "graph2d-long", "graph3d-large"],
)
def test_featurisers_refuse_over_limit_molecules_before_their_work(
    featurizer: Featurizer, smiles: str, reason: str
) -> None:
    started = time.monotonic()
    with pytest.raises(FeaturizationError, match=re.escape(reason)):
        featurizer(MolInput(smiles))
    assert time.monotonic() - started < 1  # unrefused, the descriptors alone take 5 s


def test_graph3d_refuses_a_given_geometry_over_its_limit() -> None:
    z = np.full(12, 6)
    with pytest.raises(
        FeaturizationError, match=r"more atoms with hydrogens than max_atoms \(10\)"
    ):
        Graph3D(max_atoms=10)(MolInput("C" * 12, z, np.zeros((12, 3))))


def test_etkdg_gives_up_at_its_own_timeout() -> None:
    """ETKDG fails on this molecule of the 10k CSD set (mol 2385) only after 18-35 s;
    with RDKit's timeout its two embeddings give up after a second each, no kill needed."""
    hard = "COC(=O)C1(C)CC2C3C4CC3(OC(=O)c3ccc([N+](=O)[O-])cc3)CC4(C)C2C1"
    started = time.monotonic()
    with pytest.raises(ConformerError, match="ETKDG embedding failed"):
        Graph3D(embed_timeout=1)(MolInput(hard))
    assert time.monotonic() - started < 8


@pytest.mark.parametrize(
    "name", ["descriptors", "graph2d", "graph3d", "morgan", "coulomb", "soap", "acsf", "mbtr"]
)
def test_configured_limits_are_the_featurisers_defaults(name: str) -> None:
    """`oodmol data prepare` (configs/featurizer) and the models that name only the
    featuriser's class (configs/model) must key the same cache."""
    configured = instantiate(OmegaConf.load(config_dir() / "featurizer" / f"{name}.yaml"))
    assert configured.params() == type(configured)().params()


def marked_processes(marker: str) -> list[int]:
    """Processes whose environment holds `marker`: a run's own and every worker it
    forked (Linux's /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:  # gone meanwhile, or not ours to read
                continue
    return pids


@pytest.mark.slow  # starts a Python process
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads Linux's /proc")
@pytest.mark.parametrize(
    ("signum", "to_group", "midway"),
    [(signal.SIGTERM, False, False), (signal.SIGINT, True, True)],
    ids=["SIGTERM-to-the-process-at-the-start", "SIGINT-to-its-group-midway-as-Ctrl-C"],
)
def test_a_stopped_feature_build_ends_with_one_message_and_no_temporary_file(
    tmp_path: Path, signum: signal.Signals, to_group: bool, midway: bool
) -> None:
    rows = [f"{'C' * i}(O){'C' * j}N,{i + j}" for i in range(1, 41) for j in range(1, 41)]
    csv = tmp_path / "mols.csv"
    csv.write_text("smiles,y\n" + "\n".join(rows) + "\n")
    data_dir = tmp_path / "data"
    token = f"{tmp_path.name}-{signum.name}"
    env = {**os.environ, "OODMOL_DATA_DIR": str(data_dir), "OODMOL_TEST_RUN": token}
    command = [
        sys.executable,
        "-m",
        "oodmol.cli",
        "data",
        "prepare",
        "task=csv",
        f"task.path={csv}",
    ]
    command += ["task.target_column=y", "featurizers=descriptors"]
    stderr = tmp_path / "stderr.txt"
    # its progress bar: at the start (workers starting), or once molecules are done
    progress = r"csv-mols/descriptors: .* [1-9]\d*/1600" if midway else "csv-mols/descriptors:"
    with open(stderr, "w") as err:
        run = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while not re.search(progress, stderr.read_text()):
            assert run.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "the feature build did not start"
            time.sleep(0.1)
        if to_group:  # as Ctrl-C in a terminal: the run and its workers get it
            os.killpg(run.pid, signum)
        else:
            run.send_signal(signum)
        assert run.wait(timeout=60) == 128 + signum
    finally:
        run.kill()
    text = stderr.read_text()
    assert "Traceback" not in text
    assert re.fullmatch(
        rf"\[oodmol data\] interrupted by {signum.name} while featurising "
        rf"{re.escape(str(data_dir))}/features/csv-mols-descriptors-\w+\.lmdb: "
        + re.escape(JOURNAL_KEPT),
        text.splitlines()[-1],
    ), text[-2000:]
    left = [p for p in data_dir.rglob("*") if ".tmp" in p.name or p.suffix in (".lmdb", ".seal")]
    assert left == []
    assert marked_processes(f"OODMOL_TEST_RUN={token}") == []


class StopsItsParent(Featurizer):
    """Sends `signum` to the build's process from its worker, at one molecule."""

    name = "stops"

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def params(self) -> dict:
        return {}

    def __call__(self, mol: MolInput) -> dict[str, np.ndarray]:
        if mol.smiles == "CCCC":
            os.kill(os.getppid(), self.signum)
            time.sleep(5)  # the parent ends this worker first
        return {"x": np.zeros(1)}


@pytest.fixture
def forked_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers forked from this process, whatever was imported before (tokenizers makes
    them come from a fork server), so that a worker's parent is the process it stops."""
    monkeypatch.setattr("oodmol.parallel.start_method", lambda: "fork")


@pytest.mark.usefixtures("forked_workers")
def test_a_stopped_build_raises_interrupted_and_restores_the_handlers(tmp_path: Path) -> None:
    """The handlers that were there before (training's pre-emption handler) come back."""
    smiles = ["C", "CC", "CCC", "CCCC", "CCCCC"]
    table = MoleculeTable("t", np.arange(5), np.array(smiles), {})
    before = signal.getsignal(signal.SIGTERM)

    def foreign(signum, frame) -> None:
        raise AssertionError("the handler from before the build was called")

    signal.signal(signal.SIGTERM, foreign)
    try:
        with pytest.raises(Interrupted, match="interrupted by SIGTERM while featurising") as info:
            FeatureStore.build_or_open(StopsItsParent(signal.SIGTERM), table, tmp_path)
        assert signal.getsignal(signal.SIGTERM) is foreign
    finally:
        signal.signal(signal.SIGTERM, before)
    assert info.value.exit_code == 143
    assert str(info.value).endswith(f": {JOURNAL_KEPT}")  # what it finished is kept
    assert multiprocessing.active_children() == []
    # no temporary file: the build lock, and the journal of any molecule done
    assert {p.suffix for p in tmp_path.iterdir()} <= {".journal", ".lock"}


def stopping_parse(smiles: str, **kwargs) -> Parsed:
    """`parse_smiles`, but a worker that reads "CCCC" sends SIGINT to its parent."""
    if smiles == "CCCC":
        os.kill(os.getppid(), signal.SIGINT)
        time.sleep(5)
    return parse_smiles(smiles, **kwargs)


@pytest.mark.usefixtures("forked_workers")
def test_a_stopped_validation_leaves_no_table(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "mols.csv"
    path.write_text("smiles,y\n" + "".join(f"{'C' * k},{k}\n" for k in range(1, 9)))
    monkeypatch.setattr(validation, "parse_smiles", stopping_parse)
    source = CSVSource("mols", files=[str(path)], target_columns=["y"])
    with pytest.raises(Interrupted, match="interrupted by SIGINT while validating mols") as info:
        load_dataset(source, tmp_path / "data", progress=False)
    assert info.value.exit_code == 130
    assert multiprocessing.active_children() == []
    tables = tmp_path / "data" / "tables"
    assert [p.suffix for p in tables.iterdir()] == [".lock"]


@pytest.mark.slow
def test_predict_gives_every_ordinary_row_its_prediction(tmp_path: Path) -> None:
    """Rows refused by validation (too long, too large) or by the model's featuriser
    (over its own limit) keep their line with the reason; the others are predicted."""
    task = TinyTask.create(tmp_path, workers=1)
    try:
        run = tmp_path / "rf"
        limited = [*RF, "+model.featurizer.max_atoms=50"]
        task.run(["train.py", *task.task_args(), *QUIET, *limited, f"hydra.run.dir={run}"]).ok()
        ordinary = task.molecules["smiles"].tolist()[:4]
        rows = [ordinary[0], HUGE_SMILES, ordinary[1], LARGE_CHAIN, "C" * 60, *ordinary[2:]]
        (tmp_path / "new.csv").write_text("smiles\n" + "\n".join(rows) + "\n")
        predict = ["-m", "oodmol.apps.predict", f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}"]
        predict += [f"input={tmp_path / 'new.csv'}", f"out={tmp_path / 'out.csv'}", *QUIET]
        result = task.run(predict).ok()
    finally:
        task.close()
    out = pd.read_csv(tmp_path / "out.csv", keep_default_na=False)
    assert out["error"].tolist() == [
        "",
        "SMILES longer than max_smiles_length (2000 characters)",
        "",
        "more heavy atoms than max_atoms (1000)",
        f"no features: {'C' * 60}: more heavy atoms than max_atoms (50)",
        "",
        "",
    ]
    assert [value != "" for value in out["y_pred"]] == [error == "" for error in out["error"]]
    assert "predicted 4 of 7 molecules" in result.stdout
    assert "line 3: not predicted (SMILES longer than max_smiles_length" in result.stderr
