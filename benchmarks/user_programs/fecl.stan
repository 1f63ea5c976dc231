data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> g;
  vector[N] x;
  vector[N] y;
}
parameters {
  real m0;
  vector[J] mu;
  real b;
  real<lower=0> sigma;
}
model {
  mu ~ normal(m0, 100);
  y ~ normal(mu[g] + b * x, sigma);
}
