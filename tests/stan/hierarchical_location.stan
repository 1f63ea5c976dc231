// Group intercepts around a location no row depends on: mu ~ normal(m0, 100)
// with m0 a parameter and a fixed group scale, a common slope, flat priors
// otherwise.  Rows: g, x, y.  Shared: J.
data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> g;
  vector[N] x;
  vector[N] y;
}
parameters {
  real m0;
  vector[J] mu;
  real b;
  real<lower=0> sigma;
}
model {
  mu ~ normal(m0, 100);
  y ~ normal(mu[g] + b * x, sigma);
}
