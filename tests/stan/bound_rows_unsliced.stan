// Test model: declares N >= 1 and a second vector of N values.  With only y
// sliced per row (row_vars=["y"]) the zero-row model still fails after stan_dp
// relaxes the bound (w keeps its N entries while N = 0).
data {
  int<lower=1> N;
  vector[N] y;
  vector[N] w;
}
parameters {
  real mu;
}
model {
  y ~ normal(mu, 1);
}
