// Parameters of several kinds, a simplex first (2 unconstrained coordinates for 3 values):
// which unconstrained coordinates are on the logit transform (both bounds) is read from the
// program and the compiled model's unconstrained names; a probability last, on the logit transform
// too but left out of the curvature's centring (its Jacobian is read: interval_coordinates).
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
  real<lower=0, upper=1> p;
}
model {
  tau ~ exponential(1);
  p ~ beta(2, 2);
  y ~ normal(a + b[1] + b[2] + w[1] + p, sigma);
}
