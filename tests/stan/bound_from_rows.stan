// Test model: a parameter bound computed from the row data (refused: the
// constraining transform would reveal the data).
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real<lower=(N > 0 ? max(y) : 0)> mu;
}
model {
  mu ~ normal(0, 10);
  y ~ normal(mu, 1);
}
