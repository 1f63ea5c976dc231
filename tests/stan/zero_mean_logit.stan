// Pass/fail on hours studied (0-20, uncentred) with zero-mean school effects whose scale is
// uniform on (0, 10), as rstanarm-style users write a GLMM: the intercept in the likelihood, the
// effects' statement without a location.  Rows: school, hours, pass.  Shared: J.
data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> school;
  vector[N] hours;
  array[N] int<lower=0, upper=1> pass;
}
parameters {
  real alpha;
  real beta;
  vector[J] b;
  real<lower=0, upper=10> sigma_b;
}
model {
  b ~ normal(0, sigma_b);
  pass ~ bernoulli_logit(alpha + beta * hours + b[school]);
}
