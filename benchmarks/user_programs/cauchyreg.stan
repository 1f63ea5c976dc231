data { int<lower=0> N; vector[N] trial; vector[N] rt; }
parameters { real a; real b; real<lower=0> s; }
model { rt ~ cauchy(a + b * trial, s); }
