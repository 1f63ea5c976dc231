// Bayesian linear regression with a known noise scale.
// Row variables (sliced per data row): X, y.  Shared: D, sigma, prior_scale.
data {
  int<lower=0> N;              // number of rows (the unit of privacy)
  int<lower=1> D;              // number of predictors
  matrix[N, D] X;              // predictors
  vector[N] y;                 // outcomes
  real<lower=0> sigma;         // known noise standard deviation
  real<lower=0> prior_scale;   // sd of the normal priors on alpha and beta
}
parameters {
  real alpha;
  vector[D] beta;
}
model {
  alpha ~ normal(0, prior_scale);
  beta ~ normal(0, prior_scale);
  y ~ normal_id_glm(X, alpha, beta, sigma);
}
