"""Private adaptation shared by the automatic path: scale, mode, curvature, forecast.

* :mod:`.forecast` — what a budget can buy, from public facts (the floor of issue 13);
* :mod:`.releases` — the adaptation's Gaussian mechanisms and their ledger;
* :mod:`.quantile` — private per-coordinate quantiles by binary search on noisy counts;
* :mod:`.newton` — private mode and curvature in a learned frame (averaged one-step estimates).
"""

from .forecast import Forecast, forecast, gdp_mu, pld_mean_budget, whitened_grad_scale
from .newton import AdaptationResult, AdaptationSettings, adaptation_releases, private_mode

__all__ = [
    "Forecast",
    "forecast",
    "gdp_mu",
    "pld_mean_budget",
    "whitened_grad_scale",
    "AdaptationResult",
    "AdaptationSettings",
    "adaptation_releases",
    "private_mode",
]
