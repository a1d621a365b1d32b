"""A language model's predictions for a task's test molecules (BOOM's appendix E),
resumable, in the file format `oodmol evaluate predictions=...` scores: the work of
`oodmol llm` (`oodmol.cli.llm`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pandas as pd
from hydra.utils import instantiate
from omegaconf import DictConfig
from tqdm.auto import tqdm

from oodmol.data.datamodule import checked_max_molecules
from oodmol.data.subsets import subset
from oodmol.data.task import TaskData, load_split, load_task
from oodmol.errors import UsageError
from oodmol.llm.answers import AnswerLog
from oodmol.llm.backends import (
    Backend,
    HFBackend,
    OpenAIBackend,
    RequestFailed,
)
from oodmol.llm.parse import first_number
from oodmol.llm.prompt import FewShot, PromptSpec, conversation

log = logging.getLogger("oodmol.llm")
BACKENDS = ("hf", "openai")
MAX_SHOWN = 10  # unparseable answers and failures named in the summary


def run(cfg: DictConfig) -> int:
    unknown = sorted(set(cfg.sets) - {"id", "ood"})
    if unknown or not cfg.sets:
        raise UsageError(f"sets={list(cfg.sets)}: the test sets to ask about, of id and ood")
    max_molecules = checked_max_molecules(cfg.max_molecules)
    if int(cfg.max_consecutive_failures) < 1:
        raise UsageError(f"max_consecutive_failures={cfg.max_consecutive_failures} must be ≥ 1")
    task = instantiate(cfg.task)
    splitter = instantiate(cfg.split)
    data_dir = Path(cfg.paths.data_dir)
    data = load_task(task, data_dir, cfg.progress)
    split = load_split(data, splitter, data_dir)
    spec = PromptSpec(
        property=cfg.prompt.property or task.property,
        description=task.description if cfg.prompt.description is None else cfg.prompt.description,
        units=cfg.prompt.units or task.units,
    )
    train_rows = data.table.rows_of(split.sets["train"])
    shots = FewShot(
        data.table.smiles[train_rows], data.y[train_rows], int(cfg.shots), int(cfg.seed)
    )
    backend = build_backend(cfg)
    out = Path(cfg.out)
    answers = AnswerLog(
        out.with_name(out.stem + ".answers.jsonl"),
        {
            "task": task.name,
            "split": cfg.split.name,
            "split_hash": split.hash,
            "question": spec.question("<smiles>"),
            "shots": shots.k,
            "seed": shots.seed if shots.k else None,
            **backend.settings(),
        },
    )
    molecules = _molecules(
        data, {s: subset(split.sets[s], s, max_molecules, splitter) for s in cfg.sets}
    )
    pending = molecules[~molecules["mol_id"].isin(list(answers.records))]
    print(
        f"[oodmol] llm {task.name}/{cfg.split.name}: {len(molecules)} molecules, "
        f"{len(molecules) - len(pending)} answered before, {len(pending)} to ask; "
        f"answers in {answers.path}"
    )
    failures = ask(
        backend, answers, pending, spec, shots, int(cfg.max_consecutive_failures), cfg.progress
    )
    summary = write_outputs(out, answers, molecules, failures)
    print(json.dumps(summary["counts"], indent=2))
    print(f"[oodmol] wrote {out} and {out.with_name(out.stem + '.summary.json')}")
    if failures:
        print(
            f"oodmol llm: {len(failures)} requests failed (e.g. {failures[0]['error']}); "
            "run the same command again to ask them again",
            file=sys.stderr,
        )
        return 1
    return 0


def build_backend(cfg: DictConfig) -> Backend:
    settings = cfg[cfg.backend]
    if cfg.backend == "hf":
        return HFBackend(max_new_tokens=cfg.max_new_tokens, **settings)
    return OpenAIBackend(max_new_tokens=cfg.max_new_tokens, **settings)


def _molecules(data: TaskData, sets: dict) -> pd.DataFrame:
    frames = []
    for name, ids in sets.items():
        rows = data.table.rows_of(ids)
        frames.append(pd.DataFrame({"mol_id": ids, "smiles": data.table.smiles[rows], "set": name}))
    return pd.concat(frames, ignore_index=True)


def ask(
    backend: Backend,
    answers: AnswerLog,
    pending: pd.DataFrame,
    spec: PromptSpec,
    shots: FewShot,
    max_consecutive_failures: int,
    progress: bool,
) -> list[dict]:
    """Ask about every pending molecule, a chunk at a time, saving each answer as it
    arrives; the requests that failed. Stops after the chunk in which
    `max_consecutive_failures` requests in a row failed."""
    failures: list[dict] = []
    in_a_row = 0
    rows = pending.to_dict("records")
    bar = tqdm(total=len(rows), disable=not progress, unit="mol", mininterval=1.0)
    for start in range(0, len(rows), backend.chunk_size):
        chunk = rows[start : start + backend.chunk_size]
        chats = [conversation(spec, r["smiles"], shots.examples(r["mol_id"])) for r in chunk]
        for index, reply in backend.answer(chats):
            row = chunk[index]
            bar.update(1)
            if isinstance(reply, RequestFailed):
                failures.append({"mol_id": int(row["mol_id"]), "error": str(reply)})
                in_a_row += 1
                continue
            in_a_row = 0
            record = {"mol_id": int(row["mol_id"]), "set": row["set"], "smiles": row["smiles"]}
            answers.append([{**record, "answer": reply, "value": first_number(reply)}])
        if in_a_row >= max_consecutive_failures:
            log.error("%d requests in a row failed; stopping", in_a_row)
            print(f"oodmol llm: {in_a_row} requests in a row failed; stopping", file=sys.stderr)
            break
    bar.close()
    return failures


def write_outputs(
    out: Path, answers: AnswerLog, molecules: pd.DataFrame, failures: list[dict]
) -> dict:
    """The predictions CSV (molecules whose answer holds a number) and the summary:
    counts per set and the unparseable answers and failures, by molecule."""
    records = [answers.records[i] for i in molecules["mol_id"] if int(i) in answers.records]
    parsed = [r for r in records if r["value"] is not None]
    unparseable = [r for r in records if r["value"] is None]
    frame = pd.DataFrame(parsed, columns=["mol_id", "smiles", "set", "value"])
    frame = frame.rename(columns={"value": "y_pred"}).sort_values(["set", "mol_id"])
    out.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out, index=False)
    counts = {}
    for name, group in molecules.groupby("set", sort=False):
        ids = set(group["mol_id"].astype(int))
        counts[name] = {
            "molecules": len(ids),
            "predicted": sum(r["mol_id"] in ids for r in parsed),
            "unparseable": sum(r["mol_id"] in ids for r in unparseable),
            "failed": sum(f["mol_id"] in ids for f in failures),
        }
        counts[name]["unanswered"] = counts[name]["molecules"] - sum(
            counts[name][k] for k in ("predicted", "unparseable")
        )
    summary = {
        "settings": answers.settings,
        "answers_file": str(answers.path),
        "counts": counts,
        "unparseable": [
            {k: r[k] for k in ("mol_id", "set", "answer")} for r in unparseable[:MAX_SHOWN]
        ],
        "failed": failures[:MAX_SHOWN],
    }
    out.with_name(out.stem + ".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
