data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> county; vector[N] x; vector[N] y; }
parameters { vector[J] a; real b; real mu_a; real<lower=0, upper=100> sigma_y; real<lower=0, upper=100> sigma_a; }
model { y ~ normal(a[county] + b * x, sigma_y); a ~ normal(mu_a, sigma_a); }
