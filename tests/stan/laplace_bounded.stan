// A Laplace (median) regression as users write it: house prices against a distance in metres,
// the slope declared in (-1, 1) (a unit bound, so not in bounded_coordinates), flat priors.  Its
// rows are linear in a and b (double_exponential): their curvature there is read from gradient
// outer products, in s from differences (stan_dp.adaptation.curvature._flat_rows_neg_hessians).
data {
  int<lower=0> N;
  vector[N] dist_m;
  vector[N] y;
}
parameters {
  real a;
  real<lower=-1, upper=1> b;
  real<lower=0> s;
}
model {
  y ~ double_exponential(a + b * dist_m, s);
}
