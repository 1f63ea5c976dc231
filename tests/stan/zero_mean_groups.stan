// Random intercepts as rstanarm and most users write them: the intercept in the likelihood, the
// group effects with a zero-mean statement, their scale uniform on (0, 100).  Rows: g, y.
data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> g;
  vector[N] y;
}
parameters {
  real mu;
  real<lower=0, upper=100> tau;
  vector[J] a;
  real<lower=0> sigma;
}
model {
  a ~ normal(0, tau);
  y ~ normal(mu + a[g], sigma);
}
