// Logistic regression as users write it: no prior statements (flat priors on
// the intercept and the coefficients).  Rows: X, y.
data {
  int<lower=0> N;
  int<lower=1> D;
  matrix[N, D] X;
  array[N] int<lower=0, upper=1> y;
}
parameters {
  real alpha;
  vector[D] beta;
}
model {
  y ~ bernoulli_logit(alpha + X * beta);
}
