data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> g;
  vector[N] x;
  vector[N] y;
}
parameters {
  vector[J] mu;
  real b;
  real<lower=0> sigma;
}
model {
  y ~ normal(mu[g] + b * x, sigma);
}
