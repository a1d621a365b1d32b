"""The one rule that combines several predictive distributions of the same molecules
(ensemble members, bootstrap members, MC-dropout passes) into one."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

Array = TypeVar("Array", np.ndarray, torch.Tensor)


def mixture(
    means: Array, epistemic: Array | None = None, aleatoric: Array | None = None
) -> tuple[Array, Array, Array | None]:
    """Mean and variance components of an equal-weight mixture of M members.

    Inputs are stacked along axis 0 (shape (M, N)); numpy arrays or torch tensors.
    prediction μ = (1/M) Σ_m μ_m; epistemic variance = (1/M) Σ_m (μ_m − μ)² (the spread
    of the member means, ddof = 0) plus the mean of the members' own epistemic variances
    where they have one (an ensemble of MC-dropout models or of forests); aleatoric
    variance = (1/M) Σ_m σ²_m,aleatoric (mean-variance members), None when members have
    none. Total = epistemic + aleatoric is then exactly the mixture's variance (law of
    total variance), as in Lakshminarayanan et al. 2017 and Scalia et al. 2020.
    """
    mean = means.mean(0)
    spread = ((means - mean) ** 2).mean(0)
    epistemic_var = spread if epistemic is None else spread + epistemic.mean(0)
    aleatoric_var = None if aleatoric is None else aleatoric.mean(0)
    return mean, epistemic_var, aleatoric_var
