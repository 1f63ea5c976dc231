data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> county; vector[N] x; vector[N] y; }
parameters { real mu; vector[J] a; real b; real<lower=0> sigma_y; real<lower=0> sigma_a; }
model { y ~ normal(mu + a[county] + b * x, sigma_y); a ~ normal(0, sigma_a); }
