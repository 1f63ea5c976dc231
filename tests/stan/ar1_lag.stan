// An AR(1) as users write it: each term reads the previous row (y[n - 1]),
// so the log-likelihood is not one term per row; stan_dp refuses it and says
// how to give each row its lag as data.  Rows: y.
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real alpha;
  real beta;
  real<lower=0> sigma;
}
model {
  for (n in 2:N) {
    y[n] ~ normal(alpha + beta * y[n - 1], sigma);
  }
}
