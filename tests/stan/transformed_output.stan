// Transformed parameters of both kinds: beta and scaled_alpha are computed
// from the parameters and the shared scale s alone (returned with the draws),
// eta from the rows and n_rows from the row count (left out).  Rows: X, y.
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix[N, K] X;
  array[N] int<lower=0, upper=1> y;
  real<lower=0> s;
}
parameters {
  real alpha;
  vector[K] z;
  real<lower=0> tau;
}
transformed parameters {
  vector[K] beta = s * tau * z;
  real scaled_alpha;
  scaled_alpha = alpha / s;
  vector[N] eta = alpha + X * beta;
  real n_rows = N;
}
model {
  alpha ~ normal(0, 5);
  z ~ std_normal();
  tau ~ normal(0, 1);
  y ~ bernoulli_logit(eta);
}
