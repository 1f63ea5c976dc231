// A regression on a z-scored predictor: the transformed data standardise x
// with its mean and sd over all rows (N already allows 0, so the library's
// "declare int<lower=0>" hint would be wrong).
data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
}
transformed data {
  real x_mean = mean(x);
  real x_sd = sd(x);
  vector[N] z = (x - x_mean) / x_sd;
}
parameters {
  real alpha;
  real beta;
}
model {
  alpha ~ normal(0, 5);
  beta ~ normal(0, 5);
  y ~ normal(alpha + beta * z, 1);
}
