// The canonical first model with the priors a user writes for heights in cm
// (tests/test_prior_start.py): the priors' mode is mu = 178, sigma = 20.
data { int<lower=0> N; vector[N] y; }
parameters { real mu; real<lower=0> sigma; }
model {
  mu ~ normal(178, 20);
  sigma ~ normal(0, 20);
  y ~ normal(mu, sigma);
}
