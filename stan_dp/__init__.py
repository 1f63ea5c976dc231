"""stan_dp: differentially private Bayesian inference on Stan models.

The public entry points are re-exported here:

- :func:`sample` is the one call: a Stan model, data and a budget in, a
  private posterior out (private adaptation, noise-aware Gaussian), with
  :class:`UtilityWarning` when the result is less accurate than it looks, and
  :class:`PrivacyWarning` when the budget protects less than it seems (a
  ``delta`` of at least ``1 / n``) or a non-private diagnostic was asked for;
- :func:`compile_model` compiles a Stan program into a model library;
- :class:`RowModel` gives per-row log-likelihoods and gradients;
- :func:`penalty` and :func:`penalty_expfamily` are the private penalty
  samplers (Yıldırım 2020; Räisä 2021, Section 3.1);
- :func:`mmd` and :func:`compare` put a private posterior next to a reference;
- :func:`reference_fit` is the non-private yardstick: Stan's own NUTS;
- :func:`hmc` is private HMC with clipped noisy gradients (Räisä 2021, Alg. 3);
- :func:`subsampled_penalty` and :func:`barker` are the minibatch private
  samplers (Räisä 2021, Sections 4.1 and 3.2);
- :func:`new_privacy` and :func:`augmented_sample` do inference from an
  already privatised statistic by data augmentation (Ju et al. 2022);
- :mod:`stan_dp.accounting` holds the privacy accounting.
"""

import logging as _logging

from stan_dp.version import __version__  # noqa: E402

from stan_dp.model import ModelDecompositionError, RowModel  # noqa: E402
from stan_dp.toolchain import StanCompileError, ToolchainError, compile_model  # noqa: E402
from stan_dp.bundled import bundled_model  # noqa: E402
from stan_dp.accounting import Budget, PrivacyBudgetError  # noqa: E402
from stan_dp.samplers.penalty import penalty  # noqa: E402
from stan_dp.samplers.expfamily import penalty_expfamily  # noqa: E402
from stan_dp.samplers.hmc import hmc  # noqa: E402
from stan_dp.samplers.subsampled import subsampled_penalty  # noqa: E402
from stan_dp.samplers.barker import barker  # noqa: E402
from stan_dp.expfamily_model import ExpFamilyModelError, StanExpFamilyModel  # noqa: E402
from stan_dp.diagnostics import compare, mmd  # noqa: E402
from stan_dp.reference import reference_fit  # noqa: E402
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
from stan_dp.auto import sample  # noqa: E402
from stan_dp.honesty import UtilityWarning  # noqa: E402
from stan_dp.inference import PrivacyWarning  # noqa: E402

_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = [
    "sample",
    "UtilityWarning",
    "PrivacyWarning",
    "__version__",
    "compile_model",
    "bundled_model",
    "RowModel",
    "ModelDecompositionError",
    "StanCompileError",
    "ToolchainError",
    "Budget",
    "PrivacyBudgetError",
    "penalty",
    "penalty_expfamily",
    "hmc",
    "subsampled_penalty",
    "barker",
    "StanExpFamilyModel",
    "ExpFamilyModelError",
    "mmd",
    "compare",
    "reference_fit",
    "new_privacy",
    "augmented_sample",
    "StanRecordModel",
    "Clamp",
    "Laplace",
    "Gaussian",
    "DiscreteLaplace",
    "DiscreteGaussian",
]
