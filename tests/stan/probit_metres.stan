// Probit regression as users write it: an age in years and a distance in
// metres, flat priors.  Phi underflows to 0 where |b_dist * dist| is beyond
// ~38, so the log density is -inf nearly everywhere on (-2, 2) in
// unconstrained space (Stan's default inits) and finite near 0.  Rows: age,
// dist, y.
data {
  int<lower=0> N;
  vector[N] age;
  vector[N] dist;
  array[N] int<lower=0, upper=1> y;
}
parameters {
  real a;
  real b_age;
  real b_dist;
}
model {
  y ~ bernoulli(Phi(a + b_age * age + b_dist * dist));
}
