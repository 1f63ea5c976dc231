data { int<lower=0> N; vector[N] d_km; vector[N] temp; }
parameters { real a; real b; real<lower=0, upper=100> sigma; }
model { d_km ~ normal(a + b * temp, sigma); }
