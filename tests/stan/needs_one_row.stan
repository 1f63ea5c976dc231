// Test model: declares N >= 1, so the zero-row (prior) model cannot be built.
data {
  int<lower=1> N;
  vector[N] y;
}
parameters {
  real mu;
}
model {
  y ~ normal(mu, 1);
}
