data {
  int<lower=0> N;
  vector<lower=0>[N] t;                  // follow-up time in days
  array[N] int<lower=0, upper=1> cens;   // 1 = right-censored
  vector[N] age;                         // years
  vector[N] trt;                         // 0/1
}
parameters {
  real a;
  real b_age;
  real b_trt;
  real<lower=0> shape;
}
model {
  a ~ normal(0, 10);
  b_age ~ normal(0, 1);
  b_trt ~ normal(0, 1);
  shape ~ gamma(2, 0.5);
  for (n in 1:N) {
    real scale = exp(a + b_age * age[n] + b_trt * trt[n]);
    if (cens[n] == 0)
      t[n] ~ weibull(shape, scale);
    else
      target += weibull_lccdf(t[n] | shape, scale);
  }
}
