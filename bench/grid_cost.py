"""What `experiment=boom` costs: every model x task x 3 seeds at the models' own epoch
budgets, from step times measured here, beside what BOOM's Table 4 epoch times make of
the same grid.

    python -m bench.grid_cost [--models ...] [--batches 3] [--threads 1] [--device cpu]
        [--measurements grid_measurements.json]

Each model's training and inference rates (molecules per second, at its own batch size)
are measured by bench/models_throughput.py's child process on the training molecules of
one task per data set: `csd10k_density` for the 10k tasks, `qm9_homo` for QM9 and
`lipophilicity` (the first QM9 measurement builds QM9's feature caches). One run then costs

    epochs x (n_train / train rate + n_val / inference rate) + (n_id + n_ood) / inference rate

with the epochs and set sizes of the run's own composed config and split. BOOM's run costs
its Table 4 seconds per epoch (10k set, QM9; each on the device the paper names) times
the epochs of `protocol=boom` (BOOM's budgets); Table 4 has no Lipophilicity times, so
the comparison is over the 10 OOD tasks and Lipophilicity is added to ours separately.
Runs are independent: the grid's wall-clock on k devices is its device-hours / k.
`--batch-cap` measures models whose batch does not fit in this machine's memory at a
smaller batch (rates per molecule change little with the batch for the large models);
such rates are stored under their own key and the table names the models measured so.
`--measurements` keeps the measured rates in a JSON file and reuses those it holds, so an
interrupted measurement resumes.
"""

from __future__ import annotations

import argparse
import json
from functools import cache
from pathlib import Path

import torch
from omegaconf import OmegaConf

from bench import harness
from bench.harness import REPO

NOT_BATCHED = {"rf": "fitted once, not in batches: see bench/forest_predict.py"}
MEASURED_ON = {"csd10k": "csd10k_density", "qm9": "qm9_homo", "lipophilicity": "lipophilicity"}
BOOM_SECONDS = {"csd10k": "seconds_10k", "qm9": "seconds_qm9"}


def boom_grid() -> tuple[list[str], list[str], list[int]]:
    """Models, tasks and seeds of configs/experiment/boom.yaml's sweep."""
    import oodmol.config  # noqa: F401  (resolves the grid's ${oodmol.tasks:boom})

    params = OmegaConf.load(REPO / "configs" / "experiment" / "boom.yaml").hydra.sweeper.params
    models, tasks, seeds = (str(params[k]).split(",") for k in ("model", "task", "seed"))
    return models, tasks, [int(s) for s in seeds]


def data_set(task: str) -> str:
    return next(name for name in MEASURED_ON if task.startswith(name))


@cache
def split_sizes(task: str) -> dict[str, int]:
    """The sizes of `task`'s split=ood sets (the same for every model)."""
    from hydra.utils import instantiate

    from oodmol.config import compose_config
    from oodmol.data.task import load_split, load_task

    cfg = compose_config("train", [f"task={task}", "progress=false"])
    data_dir = Path(cfg.paths.data_dir)
    data = load_task(instantiate(cfg.task), data_dir, progress=False)
    return load_split(data, instantiate(cfg.split), data_dir).sizes()


def run_shape(model: str, task: str, protocol: str) -> dict:
    """Epochs, batch size and set sizes of `model` on `task` under `protocol`."""
    from oodmol.config import compose_config

    cfg = compose_config(
        "train", [f"model={model}", f"task={task}", f"protocol={protocol}", "progress=false"]
    )
    sizes = dict(split_sizes(task))
    if not cfg.protocol.holdout:  # the validation molecules train too
        sizes["train"] += sizes.pop("val", 0)
    return {
        "epochs": int(cfg.trainer.max_epochs),
        "batch_size": int(cfg.model.batch_size),
        "train": sizes["train"],
        "val": sizes.get("val", 0),
        "test": sizes.get("id", 0) + sizes.get("ood", 0),
    }


def measured_rates(model: str, task: str, batch_size: int, args) -> dict:
    """Training and inference molecules per second of `model` on `task`'s molecules."""
    arguments = [
        "--one", model, "--task", task, "--batch-size", str(batch_size),
        "--batches", str(args.batches), "--threads", str(args.threads), "--device", args.device,
    ]  # fmt: skip
    if args.default_malloc:
        arguments.append("--default-malloc")
    figures = harness.run_child("bench.models_throughput", arguments)
    if "failed" in figures:
        return {"failed": figures["failed"]}
    return {"train_mol_s": figures["train_mol_s"], "infer_mol_s": figures["infer_mol_s"]}


def epoch_seconds(shape: dict, rates: dict) -> float:
    """One epoch: the training set at the training rate, the validation set at inference."""
    return shape["train"] / rates["train_mol_s"] + shape["val"] / rates["infer_mol_s"]


def run_seconds(shape: dict, rates: dict) -> float:
    return shape["epochs"] * epoch_seconds(shape, rates) + shape["test"] / rates["infer_mol_s"]


def main() -> None:
    from oodmol.report.boom_reference import boom_paper

    models, tasks, seeds = boom_grid()
    common = harness.options(models=",".join(models), batches=3)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], parents=[common])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--measurements", type=Path, default=None)
    parser.add_argument(
        "--batch-cap", type=int, default=0, help="measure at most this batch (memory)"
    )
    args = parser.parse_args()

    table4 = boom_paper().tables["table4"].set_index("model")
    store = args.measurements
    measurements = json.loads(store.read_text()) if store and store.is_file() else {}
    rows = []
    for model in args.models.split(","):
        if model in NOT_BATCHED:
            rows.append((model, model, {}, {}, [NOT_BATCHED[model]]))
            continue
        ours = {name: 0.0 for name in MEASURED_ON}
        boom = {name: 0.0 for name in BOOM_SECONDS}
        failed = []
        label = model
        for task in tasks:
            family = data_set(task)
            shape = run_shape(model, task, "default")
            batch = min(shape["batch_size"], args.batch_cap or shape["batch_size"])
            key = f"{model}/{MEASURED_ON[family]}/{args.device}/{args.threads}"
            if args.default_malloc:
                key += "/default-malloc"  # another allocator, another figure
            if batch < shape["batch_size"]:
                key += f"/batch{batch}"  # a rate at another batch size is another figure
                label = f"{model} (measured at batch {batch})"
            if key not in measurements:
                rates = measured_rates(model, MEASURED_ON[family], batch, args)
                measurements[key] = rates
                if store:
                    store.write_text(json.dumps(measurements, indent=1))
            rates = measurements[key]
            if "failed" in rates:
                failed.append(f"{family}: {rates['failed']}")
                failed = list(dict.fromkeys(failed))  # once per data set
            else:
                ours[family] += len(seeds) * run_seconds(shape, rates)
            if family in BOOM_SECONDS and model in table4.index:
                boom_epochs = run_shape(model, task, "boom")["epochs"]
                seconds = table4.loc[model, BOOM_SECONDS[family]]
                boom[family] += len(seeds) * boom_epochs * seconds
        rows.append((model, label, ours, boom, failed))

    print(
        f"\nexperiment=boom: {len(tasks)} tasks x {len(seeds)} seeds per model; ours measured "
        f"on {args.device}, {args.threads} thread(s), {torch.__version__}; BOOM from its "
        "Table 4 and its epoch budgets"
    )
    print(
        "| model | ours: 10 OOD tasks, device-h | ours: + Lipophilicity | "
        "BOOM: 10 OOD tasks, GPU-h | BOOM's device | ours / BOOM |"
    )
    print("|" + "---|" * 6)
    timed = [0.0, 0.0]  # ours and BOOM's over the models both have
    for model, label, ours, boom, failed in rows:
        if failed:
            print(f"| {label} | not measured: {'; '.join(failed)} |||||")
            continue
        ten = (ours["csd10k"] + ours["qm9"]) / 3600
        with_lipo = ten + ours["lipophilicity"] / 3600
        boom_h = (boom["csd10k"] + boom["qm9"]) / 3600
        device = table4.loc[model, "device"] if model in table4.index else "—"
        ratio = f"{ten / boom_h:.2g}" if boom_h else "—"
        boom_text = f"{boom_h:.3g}" if boom_h else "— (not in BOOM)"
        print(f"| {label} | {ten:.3g} | {with_lipo:.3g} | {boom_text} | {device} | {ratio} |")
        if boom_h:
            timed = [timed[0] + ten, timed[1] + boom_h]
    if timed[1]:
        print(
            f"| models BOOM timed | {timed[0]:.3g} | | {timed[1]:.3g} | | "
            f"{timed[0] / timed[1]:.2g} |"
        )
    for model, _, ours, _, failed in rows:
        if not failed:
            print(f"model={model} " + " ".join(f"{k}_h={v / 3600:.4g}" for k, v in ours.items()))


if __name__ == "__main__":
    main()
