"""oodmol llm: a language model's predictions for a task's test molecules (BOOM's
appendix E), resumable, in the file format `oodmol evaluate predictions=...` scores.

    oodmol llm task=csd10k_density split=ood backend=hf hf.model=<dir> out=llm.csv
    oodmol evaluate task=csd10k_density split=ood predictions=llm.csv model_name=<name>

The molecules are those of the persisted split train.py uses (and, with
`max_molecules`, its subset). Answers without a number are kept in the answers file with
their text and left out of the predictions file, so the evaluation flags the run as
partial; requests that failed are asked again by the next run. Exit status: 0 when every
molecule has an answer, 1 when some requests failed, 2 on a usage or settings error.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from oodmol.apps.llm import BACKENDS, run
from oodmol.cli.entry import entry_point
from oodmol.credentials import check_key_variable
from oodmol.errors import UsageError
from oodmol.overrides import tool_config


@entry_point("oodmol llm", usage=__doc__)
def main(argv: list[str]) -> int:
    cfg = tool_config("llm", argv, required=("backend", "out"))
    if cfg.backend not in BACKENDS:
        raise UsageError(f"backend={cfg.backend!r}; one of {', '.join(BACKENDS)}")
    if OmegaConf.is_missing(cfg[cfg.backend], "model"):
        raise UsageError(f"{cfg.backend}.model=... is required: the model to ask")
    if cfg.backend == "openai":
        check_key_variable("openai.api_key_env", cfg.openai.api_key_env)
    return run(cfg)
