data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
  vector<lower=0>[N] w;   // survey weights
}
parameters {
  real a; real b; real<lower=0> sigma;
}
model {
  for (n in 1:N) target += w[n] * normal_lpdf(y[n] | a + b * x[n], sigma);
}
