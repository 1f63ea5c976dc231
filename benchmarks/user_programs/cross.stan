data { int<lower=0> N; int<lower=1> J; int<lower=1> K; array[N] int<lower=1, upper=J> site; array[N] int<lower=1, upper=K> year; vector[N] y; }
parameters { vector[J] a; vector[K] c; real<lower=0> sigma; }
transformed parameters {
  vector[N] eta = a[site] + c[year];
}
model {
  a ~ normal(0, 10);
  c ~ normal(0, 10);
  y ~ normal(eta, sigma);
}
