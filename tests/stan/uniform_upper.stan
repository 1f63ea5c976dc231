// Test model: rows uniform on (0, exp(mu)).  A row above exp(mu) is impossible
// (log-likelihood -inf, not an error), so near mu < log(y_i) a proposal and the
// current point can both give -inf for that row (tests/test_side_channels.py).
data {
  int<lower=0> N;
  vector<lower=0>[N] y;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 2);
  y ~ uniform(0, exp(mu));
}
