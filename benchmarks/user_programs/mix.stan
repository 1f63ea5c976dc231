data { int<lower=0> N; vector[N] y; }
parameters { ordered[2] mu; real<lower=0> sigma; real<lower=0, upper=1> theta; }
model {
  mu ~ normal(0, 10); sigma ~ normal(0, 5); 
  for (n in 1:N) target += log_mix(theta, normal_lpdf(y[n] | mu[1], sigma), normal_lpdf(y[n] | mu[2], sigma));
}
