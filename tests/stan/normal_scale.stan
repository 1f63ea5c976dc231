// A normal model with unknown mean and scale, no prior statements (flat; improper on
// sigma > 0): the exact posterior of sigma is known in closed form.  Rows: y.
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real mu;
  real<lower=0> sigma;
}
model {
  y ~ normal(mu, sigma);
}
