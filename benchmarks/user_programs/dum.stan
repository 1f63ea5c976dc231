data { int<lower=0> N; int<lower=1> K; matrix[N, K] X; vector[N] y; }
parameters { real alpha; vector[K] beta; real<lower=0> sigma; }
model {
  alpha ~ normal(0, 10);
  beta ~ normal(0, 5);
  sigma ~ exponential(0.1);
  y ~ normal(alpha + X * beta, sigma);
}
