data { int<lower=0> N; vector[N] income; vector<lower=0>[N] y; }
parameters { real a; real b; real<lower=0> shape; }
model {
  vector[N] mu = exp(a + b * income);
  y ~ gamma(shape, shape ./ mu);
}
