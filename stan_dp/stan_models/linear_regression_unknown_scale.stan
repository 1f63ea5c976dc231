// Bayesian linear regression with an unknown noise scale.
// Row variables (sliced per data row): X, y.  Shared: D, prior_scale, sigma_scale.
data {
  int<lower=0> N;               // number of rows (the unit of privacy)
  int<lower=1> D;               // number of predictors
  matrix[N, D] X;               // predictors
  vector[N] y;                  // outcomes
  real<lower=0> prior_scale;    // sd of the normal priors on alpha and beta
  real<lower=0> sigma_scale;    // scale of the half-normal prior on sigma
}
parameters {
  real alpha;
  vector[D] beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, prior_scale);
  beta ~ normal(0, prior_scale);
  sigma ~ normal(0, sigma_scale);
  y ~ normal_id_glm(X, alpha, beta, sigma);
}
