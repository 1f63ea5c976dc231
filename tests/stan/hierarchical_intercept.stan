// Varying-intercept model: rows in J groups, group intercepts partially
// pooled (half-normal prior on the group sd), as users write it.
// Rows: g, y.  Shared: J.
data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> g;
  vector[N] y;
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] a;
  real<lower=0> sigma;
}
model {
  mu ~ normal(0, 100);
  tau ~ normal(0, 10);
  sigma ~ normal(0, 10);
  a ~ normal(mu, tau);
  y ~ normal(a[g], sigma);
}
