// Parameters of several kinds, a simplex first (2 unconstrained coordinates for 3 values):
// which unconstrained coordinates are on the logit transform (both bounds) is read from the
// program and the compiled model's unconstrained names.
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  simplex[3] w;
  real<lower=0, upper=100> sigma;
  vector<lower=-10, upper=10>[2] b;
  real<lower=0> tau;
  real a;
}
model {
  tau ~ exponential(1);
  y ~ normal(a + b[1] + b[2] + w[1], sigma);
}
