// Test model: a success rate held by data bounds (L, U) that the data's own rate lies below, so
// the posterior piles up against L (tests/test_at_bound.py).  Row variable: y.
data {
  int<lower=0> N;
  real L;
  real<lower=L> U;
  array[N] int<lower=0, upper=1> y;
}
parameters {
  real<lower=L, upper=U> p;
}
model {
  y ~ bernoulli(p);
}
generated quantities {
  real odds = p / (1 - p);   // from the parameter alone: returned with the draws
}
