// Test model: a term that couples the rows, so the log density does not
// split into per-row terms (refused).
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 1);
  y ~ normal(mu, 1);
  target += -square(sum(y)) * square(mu) / 100;
}
