data { int<lower=0> N; vector[N] h; }
parameters { real<lower=0, upper=300> mu; real<lower=0, upper=100> sigma; }
model { h ~ normal(mu, sigma); }
