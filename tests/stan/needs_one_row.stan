// Test model: declares N >= 1 (as published programs often do); the zero-row
// (prior) model needs N = 0, so stan_dp compiles it with the bound relaxed.
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
