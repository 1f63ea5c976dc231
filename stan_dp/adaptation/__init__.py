"""Private adaptation, apart from the kernels: scale, mode, curvature, forecast, warm-up.

* :mod:`.forecast` — what a budget can buy, from public facts (the floor of issue 13);
* :mod:`.releases` — the adaptation's Gaussian mechanisms and their ledger;
* :mod:`.quantile` — private per-coordinate quantiles by binary search on noisy counts;
* :mod:`.far` — the far phase: sign-led steps from a start far from the posterior;
* :mod:`.newton` — private mode and curvature in a learned frame (averaged one-step estimates);
* :mod:`.ridge` — the ridges a released curvature matrix shows (entries beyond their noise);
* :mod:`.whitened` — the model seen in the learned frame;
* :mod:`.warmup` — a chain's own warm-up (DP HMC's): the averaged gradient-ascent mode search
  on released gradients and Stan's dual-averaging step size, post-processing of released values.

Nothing here imports :mod:`stan_dp.samplers` (``tests/test_layers.py``): samplers use
adaptation, not the other way round.
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
