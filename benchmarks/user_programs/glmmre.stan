data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> school; vector[N] hours; array[N] int<lower=0, upper=1> pass; }
parameters { real alpha; real beta; vector[J] b; real<lower=0, upper=10> sigma_b; }
model { b ~ normal(0, sigma_b); pass ~ bernoulli_logit(alpha + beta * hours + b[school]); }
