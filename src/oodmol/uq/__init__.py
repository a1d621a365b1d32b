"""Uncertainty: how a run gets its σ (estimators: ensembles, bootstrap, MC dropout,
mean-variance heads), recalibration (calibrators), the metrics (evaluators) and figures;
the maths only: training runs and combines ensemble members (`oodmol.training`)."""
