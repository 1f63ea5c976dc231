// Logistic regression with a varying intercept over J groups, non-centred as the Stan manual
// advises (mu + tau * z[g], z ~ std_normal()), and a predictor around 30.  Its posterior is far
// from Gaussian in tau: the mode shrinks z and inflates tau (tests/test_skew_check.py).
// Rows: g, x, y.  Shared: J.
data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> g;
  vector[N] x;
  array[N] int<lower=0, upper=1> y;
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] z;
  real b;
}
model {
  mu ~ normal(0, 5);
  tau ~ normal(0, 2);
  z ~ std_normal();
  b ~ normal(0, 5);
  y ~ bernoulli_logit(mu + tau * z[g] + b * x);
}
