// A Poisson rate as users write it: one positive parameter (sampled on the
// log scale), an exponential prior, counts that are mostly 0.  Rows: y.
data {
  int<lower=0> N;
  array[N] int<lower=0> y;
}
parameters {
  real<lower=0> lambda;
}
model {
  lambda ~ exponential(1);
  y ~ poisson(lambda);
}
