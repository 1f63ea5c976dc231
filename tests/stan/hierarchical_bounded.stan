// Varying-intercept model as Gelman and Hill's BUGS code writes it: both scales uniform on
// (0, 100) through their bounds, no other prior.  Rows: g, y.  Shared: J.
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
  real<lower=0, upper=100> sigma;
}
model {
  a ~ normal(mu, tau);
  y ~ normal(a[g], sigma);
}
