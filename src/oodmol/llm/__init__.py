"""Large language models asked for property values as BOOM did (its appendix E): one
prompt per test molecule, the first number of the answer as the prediction, scored as an
external predictions file (`oodmol llm`, then `oodmol evaluate predictions=...`)."""
