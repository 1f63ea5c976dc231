// Bayesian logistic regression with independent normal priors.
// Row variables (sliced per data row): X, y.  Shared: D, prior_scale.
data {
  int<lower=0> N;                       // number of rows (the unit of privacy)
  int<lower=1> D;                       // number of predictors
  matrix[N, D] X;                       // predictors, one row per record
  array[N] int<lower=0, upper=1> y;     // binary outcomes
  real<lower=0> prior_scale;            // sd of the normal priors
}
parameters {
  real alpha;
  vector[D] beta;
}
model {
  alpha ~ normal(0, prior_scale);
  beta ~ normal(0, prior_scale);
  y ~ bernoulli_logit_glm(X, alpha, beta);
}
