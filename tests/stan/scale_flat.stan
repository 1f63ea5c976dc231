// Linear regression as users write it: an unstandardised predictor (metres),
// no prior statement on the coefficients or the scale (flat, improper on
// sigma > 0).  Rows: x, y.
data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
}
parameters {
  real alpha;
  real beta;
  real<lower=0> sigma;
}
model {
  y ~ normal(alpha + beta * x, sigma);
}
