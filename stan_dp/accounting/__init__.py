"""Privacy accounting for stan_dp's samplers.

Every sampler releases data only through Gaussian mechanisms, sometimes on a
batch of rows drawn without replacement.  This package turns a per-iteration
release plan into iterations, noise, or epsilon:

* plain Gaussian compositions are accounted **exactly** (their privacy-loss
  distribution is :math:`\\mathcal N(M, 2M)`), see :mod:`.gaussian`;
* subsampled Gaussians use Rényi DP with the Wang–Balle–Kasiviswanathan
  amplification through ``dp_accounting``, see :mod:`.subsampled`, :mod:`.rdp`;
* the seeds' own bounds are in :mod:`.bounds` for reports and comparisons;
* mechanisms given by a per-step RDP curve (DP Barker, seed 003, Thm 8) are
  composed by :mod:`.curve`;
* :class:`Budget` is what samplers share.

Conventions: a noise multiplier is always ``noise sd / sensitivity`` with the
sensitivity under the budget's neighbouring relation; a per-row clip bound ``C``
gives sensitivity ``sensitivity_factor(relation) * C`` (``2C`` for replace-one,
``C`` for add/remove).
"""

from .budget import ACCOUNTANT_PLD, ACCOUNTANT_RDP, Budget, Release
from .curve import ACCOUNTANT_CURVE, RdpCurve, barker_step_rdp, curve_epsilon, curve_max_steps
from .errors import PrivacyBudgetError
from .gaussian import (
    calibrate_gaussian_noise,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_max_count,
    gaussian_pld_mean,
    max_gaussian_pld_mean,
)
from .rdp import RDP_ORDERS
from .subsampled import (
    calibrate_subsampled_gaussian_noise,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_max_count,
    subsampled_gaussian_rdp,
)
from .validation import RELATIONS, sensitivity_factor, validate_privacy_params

__all__ = [
    "PrivacyBudgetError",
    "gaussian_epsilon",
    "gaussian_delta",
    "gaussian_max_count",
    "gaussian_pld_mean",
    "max_gaussian_pld_mean",
    "calibrate_gaussian_noise",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_max_count",
    "subsampled_gaussian_rdp",
    "calibrate_subsampled_gaussian_noise",
    "Release",
    "Budget",
    "ACCOUNTANT_PLD",
    "ACCOUNTANT_RDP",
    "RDP_ORDERS",
    "RdpCurve",
    "curve_epsilon",
    "curve_max_steps",
    "barker_step_rdp",
    "ACCOUNTANT_CURVE",
    "RELATIONS",
    "validate_privacy_params",
    "sensitivity_factor",
]
