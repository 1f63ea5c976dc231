data {
  int<lower=0> N;
  int<lower=1> R;
  array[N] int<lower=1, upper=R> region;
  vector[N] exposure;     // person-years
  vector[N] age;          // years
  array[N] int<lower=0> cases;
}
parameters {
  real alpha;
  real b_age;
  vector[R] u;
  real<lower=0> sigma_u;
}
model {
  alpha ~ normal(0, 10);
  b_age ~ normal(0, 1);
  sigma_u ~ normal(0, 1);
  u ~ normal(0, sigma_u);
  cases ~ poisson_log(log(exposure) + alpha + b_age * age + u[region]);
}
