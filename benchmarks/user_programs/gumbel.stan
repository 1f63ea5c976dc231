data { int<lower=0> N; vector[N] q; }
parameters { real mu; real<lower=0> beta; }
model { mu ~ normal(0, 1000); beta ~ cauchy(0, 100); q ~ gumbel(mu, beta); }
