"""stan_dp: differentially private Bayesian inference on Stan models."""

__version__ = "0.1.0"
