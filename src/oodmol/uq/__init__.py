"""Uncertainty: how a run gets its σ (estimators: ensembles, bootstrap, MC dropout,
mean-variance heads), recalibration (calibrators), the metrics (evaluators) and figures;
``python -m oodmol.uq combine`` merges ensemble members. Never imports `oodmol.eval`."""
