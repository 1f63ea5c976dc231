// Two-component normal mixture, ordered means: a posterior with a saddle where the components
// merge (tests/test_saddle.py).
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  ordered[2] mu;
  vector<lower=0>[2] sigma;
  real<lower=0, upper=1> lambda;
}
model {
  mu ~ normal(50, 30);
  sigma ~ normal(0, 20);
  lambda ~ beta(2, 2);
  for (n in 1:N) {
    target += log_mix(lambda, normal_lpdf(y[n] | mu[1], sigma[1]), normal_lpdf(y[n] | mu[2], sigma[2]));
  }
}
