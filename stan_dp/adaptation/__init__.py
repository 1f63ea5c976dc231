"""Private adaptation, apart from the kernels: scale, mode, curvature, forecast, warm-up.

* :mod:`.forecast` — what a budget can buy, from public facts (the floor of issue 13);
* :mod:`.releases` — the adaptation's Gaussian mechanisms and their ledger;
* :mod:`.quantile` — private per-coordinate quantiles by binary search on noisy counts;
* :mod:`.prior_start` — the start: the mode of the program's priors, offered to the rows (one
  or two releases) where it places a location away from zeros;
* :mod:`.far` — the far phase: sign-led steps from a start far from the posterior;
* :mod:`.groups` — a centred hierarchical group's direction (its elements and their location
  together), for the far phase and the first frame;
* :mod:`.plan` — the search's settings and every release it will make, from public facts;
* :mod:`.initial_frame` — the search's starting frame: private scales, a turn along a ridge;
* :mod:`.curvature` — per-row curvature in the frame and one round's frame algebra;
* :mod:`.newton` — private mode and curvature in a learned frame (the Newton rounds);
* :mod:`.curvature_bound` — the curvature bound near the mode, raised where released counts say
  its clipping biases the released curvature;
* :mod:`.pooling` — the rounds near the mode pooled into one estimate (post-processing);
* :mod:`.final_check` — where the rounds are blind, one release that lets an unsettled search
  report a point it evaluated instead of its last step;
* :mod:`.skew` — one release at the reported mode of how far the posterior's mean is from it by
  the posterior's shape (a Gaussian at the mode cannot be a posterior far from Gaussian);
* :mod:`.result` — what the search returns and the diagnostics read from it;
* :mod:`.ridge` — the ridges a released curvature matrix shows (entries beyond their noise);
* :mod:`.whitened` — the model seen in the learned frame;
* :mod:`.warmup` — a chain's own warm-up (DP HMC's): the averaged gradient-ascent mode search
  on released gradients and Stan's dual-averaging step size, post-processing of released values.

Nothing here imports :mod:`stan_dp.samplers` (``tests/test_layers.py``): samplers use
adaptation, not the other way round.
"""

from .forecast import Forecast, forecast, gdp_mu, pld_mean_budget, whitened_grad_scale
from .newton import private_mode
from .plan import AdaptationSettings, adaptation_releases
from .result import AdaptationResult

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
