// Logistic regression with uniform-bounded coefficients (uniform(-10, 10)
// priors implied by the bounds), as in many published examples.  Rows: X, y.
data {
  int<lower=0> N;
  int<lower=1> D;
  matrix[N, D] X;
  array[N] int<lower=0, upper=1> y;
}
parameters {
  real<lower=-10, upper=10> alpha;
  vector<lower=-10, upper=10>[D] beta;
}
model {
  y ~ bernoulli_logit(alpha + X * beta);
}
