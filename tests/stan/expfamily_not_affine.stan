// Test model: the log density is quadratic in the statistic (refused by
// StanExpFamilyModel).
data {
  int<lower=0> N;
  vector[1] S;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 1);
  target += square(S[1]) * mu - 0.5 * N * square(mu);
}
