"""stan_dp: differentially private Bayesian inference on Stan models.

The public entry points are re-exported here:

- :func:`compile_model` compiles a Stan program into a model library;
- :class:`RowModel` gives per-row log-likelihoods and gradients;
- :func:`penalty` and :func:`penalty_expfamily` are the private penalty
  samplers (Yıldırım 2020; Räisä 2021, Section 3.1);
- :mod:`stan_dp.accounting` holds the privacy accounting;
- :func:`new_privacy` and :func:`augmented_sample` do inference from an
  already privatised statistic by data augmentation (Ju et al. 2022).
"""

import logging as _logging

__version__ = "0.1.0"

from stan_dp.model import ModelDecompositionError, RowModel  # noqa: E402
from stan_dp.toolchain import StanCompileError, ToolchainError, compile_model  # noqa: E402
from stan_dp.accounting import Budget, PrivacyBudgetError  # noqa: E402
from stan_dp.samplers.penalty import penalty  # noqa: E402
from stan_dp.samplers.expfamily import penalty_expfamily  # noqa: E402
from stan_dp.expfamily_model import ExpFamilyModelError, StanExpFamilyModel  # noqa: E402
from stan_dp.augmentation import (  # noqa: E402
    Clamp,
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    StanRecordModel,
    new_privacy,
)
from stan_dp.samplers.augmentation import augmented_sample  # noqa: E402

_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = [
    "__version__",
    "compile_model",
    "RowModel",
    "ModelDecompositionError",
    "StanCompileError",
    "ToolchainError",
    "Budget",
    "PrivacyBudgetError",
    "penalty",
    "penalty_expfamily",
    "StanExpFamilyModel",
    "ExpFamilyModelError",
    "new_privacy",
    "augmented_sample",
    "StanRecordModel",
    "Clamp",
    "Laplace",
    "Gaussian",
    "DiscreteLaplace",
    "DiscreteGaussian",
]
