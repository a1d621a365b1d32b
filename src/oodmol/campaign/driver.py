"""A campaign's rounds, one after another, each a train.py run of its own: train on the
training split plus what was acquired so far (`split=ood_campaign`), score what remains of
the OOD pool, acquire a batch, reveal its labels, record the round.

The campaign's folder:

    campaign.json       its settings, train.py overrides and the runs' configuration key
    pool.json           the pool (round 0's OOD set) with its labels, the top molecules to
                        find, and what the starting labels give (centre, best value)
    rounds/<r>/         round r's run folder (metrics.json, predictions.csv, checkpoints)
    rounds/<r>.json     round r's record: what was acquired, and where the campaign stood
    summary.csv         one row per recorded round

Each file is written atomically, and a round is done when its record exists. Running the
same command again goes on after the last recorded round: a round's run that was cut short
resumes from its last checkpoint (train.py's resume=true), one that finished is reused.
The labels of pool molecules are read for the records only; acquisition sees μ and σ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig

from oodmol.bounded import read_json
from oodmol.campaign.acquisition import NEEDS_SIGMA, Objective, acquisition_scores, select_batch
from oodmol.campaign.progress import best_value, progress, top_molecules
from oodmol.campaign.settings import CampaignSettings, campaign_key, default_folder
from oodmol.data.task import load_split, load_task
from oodmol.errors import USER_ERROR, UserError
from oodmol.identity import config_key
from oodmol.io import atomic_write_json, atomic_write_text
from oodmol.overrides import compose_checked
from oodmol.provenance import package_versions
from oodmol.training.child import run_train

SPLIT = "split=ood_campaign"
SUMMARY_COLUMNS = (
    "round",
    "n_acquired_before",
    "n_scored",
    "ood_rmse",
    "n_acquired",
    "best_found",
    "best_known",
    "n_top_found",
    "n_top",
    "recall",
)


class CampaignError(UserError):
    """A campaign that cannot go on; `code` is its exit status (2: its settings or
    folder, 1: a round's run failed)."""

    def __init__(self, message: str, code: int = USER_ERROR) -> None:
        super().__init__(message)
        self.code = self.exit_code = code


class Campaign:
    """The folder of one campaign and its rounds."""

    def __init__(self, settings: CampaignSettings, overrides: list[str]) -> None:
        self.settings = settings
        self.overrides = list(overrides)
        self.cfg = compose_checked("train", [*self.overrides, SPLIT])
        self.run_key = config_key(self.cfg)
        self.key = campaign_key(settings, self.run_key)
        cfg = self.cfg
        self.folder = Path(
            settings.out
            or default_folder(
                cfg.paths.log_dir,
                cfg.task.name,
                f"{cfg.model.name}{cfg.uq.run_tag}",
                settings.acquisition,
                self.key,
                cfg.seed,
            )
        )

    # files
    def record_path(self, round_: int) -> Path:
        return self.folder / "rounds" / f"{round_}.json"

    def run_folder(self, round_: int) -> Path:
        return self.folder / "rounds" / str(round_)

    def records(self) -> list[dict]:
        """The recorded rounds, in order (a round is recorded after all before it)."""
        found = []
        while self.record_path(len(found)).is_file():
            found.append(_checked_record(self.record_path(len(found))))
        return found

    def claim(self) -> None:
        """Write campaign.json, or check that the folder holds this campaign."""
        description = {
            "campaign_key": self.key,
            "settings": self.settings.identity(),
            "run_config_key": self.run_key,
            "overrides": self.overrides,
            "task": self.cfg.task.name,
            "model": self.cfg.model.name,
            "uq": self.cfg.uq.name,
            "seed": int(self.cfg.seed),
        }
        path = self.folder / "campaign.json"
        if not path.is_file():
            atomic_write_json(path, {**description, "versions": package_versions()})
            return
        held = read_json(path, "campaign description")
        differs = [k for k in ("settings", "run_config_key") if held.get(k) != description[k]]
        if differs:
            raise CampaignError(
                f"{self.folder} holds another campaign (its {' and '.join(differs)} differ: "
                f"{ {k: held.get(k) for k in differs} }, this one "
                f"{ {k: description[k] for k in differs} }); choose another out= or delete it"
            )

    def run(self) -> int:
        """Every round not yet recorded, up to `rounds`; 0 when all are recorded."""
        self.claim()
        records = self.records()
        for round_ in range(len(records), self.settings.rounds):
            acquired = [m["mol_id"] for r in records for m in r["acquired"]]
            pool = self.pool()
            if pool is not None and len(acquired) >= len(pool["mol_id"]):
                print(f"[oodmol campaign] the pool is exhausted after round {round_ - 1}")
                break
            records.append(self.play(round_, acquired))
            self.write_summary(records)
            last = records[-1]
            print(
                f"[oodmol campaign] round {round_}: OOD RMSE {last['ood_rmse']:.4g} on "
                f"{last['n_scored']} molecules; acquired {last['n_acquired']}, best "
                f"{last['best_found']:.4g}, recall {last['recall']:.3f} "
                f"({last['n_top_found']}/{last['n_top']})",
                flush=True,
            )
        self.write_summary(records)
        print(f"[oodmol campaign] {len(records)} rounds recorded in {self.folder}")
        return 0

    def play(self, round_: int, acquired: list[int]) -> dict:
        """Train round `round_`'s model, acquire its batch, and record the round."""
        folder = self.run_folder(round_)
        ids = ",".join(str(i) for i in sorted(acquired))
        overrides = [*self.overrides, SPLIT, f"split.acquired=[{ids}]"]
        print(f"[oodmol campaign] round {round_}: training with {len(acquired)} acquired")
        code = run_train([*overrides, f"hydra.run.dir={folder}", "resume=true"])
        if code:
            raise CampaignError(
                f"round {round_}'s run ({folder}) exited with status {code}; the rounds before "
                "it are kept: run the same command again to go on",
                code=1,
            )
        scored = self.scored(folder)
        pool = self.pool() or self.write_pool(scored)
        remaining = np.setdiff1d(pool["mol_id"], acquired)
        if not np.array_equal(np.sort(scored["mol_id"].to_numpy()), remaining):
            raise CampaignError(
                f"{folder}: the run scored {len(scored)} OOD molecules, but {len(remaining)} "
                "of the campaign's pool remain; the run is not of this campaign"
            )
        return self.acquire(round_, scored, pool, acquired)

    def scored(self, folder: Path) -> pd.DataFrame:
        """The run's predictions for the remaining pool, checked to have what the
        acquisition rule needs."""
        predictions = pd.read_csv(folder / "predictions.csv")
        scored = predictions[predictions["set"] == "ood"].reset_index(drop=True)
        rule = self.settings.acquisition
        if rule in NEEDS_SIGMA and (
            "y_std" not in scored or not np.isfinite(scored["y_std"]).all()
        ):
            raise CampaignError(
                f"acquisition={rule} needs a predictive σ, and {folder}/predictions.csv has "
                "none: use a uq method (uq=ensemble, mc_dropout, mve, ...) or a model with its "
                "own (model=rf)"
            )
        return scored

    def pool(self) -> dict | None:
        path = self.folder / "pool.json"
        if not path.is_file():
            return None
        pool = read_json(path, "campaign pool")
        pool["mol_id"] = np.asarray(pool["mol_id"], dtype=np.int64)
        return pool

    def write_pool(self, scored: pd.DataFrame) -> dict:
        """The pool as round 0 scored it, its labels, the top molecules to find, and what
        the starting labels (training and validation sets) give."""
        start = self.starting_labels()
        centre = float(np.median(start))
        objective = Objective(self.settings.direction, centre)
        ids, y = scored["mol_id"].to_numpy(np.int64), scored["y_true"].to_numpy(float)
        pool = {
            "mol_id": ids.tolist(),
            "smiles": scored["smiles"].tolist(),
            "y_true": y.tolist(),
            "direction": self.settings.direction,
            "centre": centre,
            "start_labelled": len(start),
            "start_best": best_value(start, objective),
            "pool_best": best_value(y, objective),
            "top": top_molecules(ids, y, objective, self.settings.top_fraction).tolist(),
        }
        atomic_write_json(self.folder / "pool.json", pool)
        return self.pool()

    def starting_labels(self) -> np.ndarray:
        """The property values known before the campaign: round 0's training and
        validation molecules."""
        cfg: DictConfig = self.cfg
        data = load_task(instantiate(cfg.task), Path(cfg.paths.data_dir), progress=False)
        split = load_split(data, instantiate(cfg.split), Path(cfg.paths.data_dir))
        ids = np.concatenate([split.sets["train"], split.sets["val"]])
        return data.y[data.table.rows_of(ids)]

    def acquire(self, round_: int, scored: pd.DataFrame, pool: dict, acquired: list) -> dict:
        """Score the remaining pool, take the batch, and reveal its labels."""
        settings = self.settings
        objective = Objective(settings.direction, pool["centre"])
        labels = dict(zip(pool["mol_id"].tolist(), pool["y_true"], strict=True))
        known = [pool["start_best"], *(labels[i] for i in acquired)]
        incumbent = float(np.max(objective.utility(known)))
        sigma = scored["y_std"].to_numpy(float) if "y_std" in scored else None
        rng = np.random.default_rng([int(self.cfg.seed), round_])
        scores = acquisition_scores(
            settings.acquisition,
            objective,
            scored["y_pred"].to_numpy(float),
            sigma,
            incumbent,
            settings.kappa,
            rng,
        )
        mol_id = scored["mol_id"].to_numpy(np.int64)
        batch = select_batch(scores, mol_id, settings.batch)
        chosen = [
            {
                "mol_id": int(mol_id[k]),
                "smiles": str(scored["smiles"][k]),
                "y_pred": float(scored["y_pred"][k]),
                "y_std": None if sigma is None else float(sigma[k]),
                "score": float(scores[k]),
                "y_true": float(labels[int(mol_id[k])]),  # revealed now
            }
            for k in batch
        ]
        now = [*acquired, *(m["mol_id"] for m in chosen)]
        errors = scored["y_pred"].to_numpy(float) - scored["y_true"].to_numpy(float)
        record = {
            "round": round_,
            "run": str(self.run_folder(round_).relative_to(self.folder)),
            "n_acquired_before": len(acquired),
            "n_scored": len(scored),
            "ood_rmse": float(np.sqrt(np.mean(errors**2))),
            "incumbent_utility": incumbent,
            "acquired": chosen,
            **progress(
                np.asarray(now),
                np.asarray([labels[i] for i in now]),
                np.asarray(pool["top"]),
                pool["start_best"],
                objective,
            ),
        }
        atomic_write_json(self.record_path(round_), record)
        return record

    def write_summary(self, records: list[dict]) -> None:
        table = summary_table(records)
        atomic_write_text(self.folder / "summary.csv", table.to_csv(index=False))


def _checked_record(path: Path) -> dict:
    """A round's record as this campaign wrote it: its acquired molecules go into the
    next run's split as an override, so each must be a plain molecule id."""
    try:
        record = read_json(path, "campaign round")
    except (OSError, ValueError) as error:
        raise CampaignError(
            f"{path} cannot be read ({error}); delete it to play the round again"
        ) from None
    acquired = record.get("acquired") if isinstance(record, dict) else None
    if not isinstance(acquired, list) or not all(
        isinstance(m, dict) and type(m.get("mol_id")) is int and m["mol_id"] >= 0 for m in acquired
    ):
        raise CampaignError(
            f"{path} is not a round record this campaign wrote (its acquired molecules must "
            "be molecule ids); delete it to play the round again"
        )
    return record


def summary_table(records: list[dict]) -> pd.DataFrame:
    """One row per round record, without the acquired molecules."""
    return pd.DataFrame(
        [{k: r[k] for k in SUMMARY_COLUMNS} for r in records], columns=SUMMARY_COLUMNS
    )
