"""The Hydra applications behind `oodmol train`, `oodmol evaluate` and `oodmol predict`
(and the repository's train.py and evaluate.py): compose the config tree, bound the
threads, call the one function that does the work. Beside them, the work of
`oodmol llm`, `oodmol pretrain` and `oodmol reproduce`, whose command lines are
`oodmol.cli`'s."""
