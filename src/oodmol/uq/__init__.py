"""Uncertainty: ensembles, bootstrap, MC dropout and mean-variance heads, their metrics,
recalibration and figures; ``python -m oodmol.uq combine`` merges ensemble members."""
