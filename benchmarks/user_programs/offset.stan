data { int<lower=0> N; vector[N] pop; vector[N] income; array[N] int<lower=0> y; }
parameters { real a; real b; }
model {
  a ~ normal(0, 10); b ~ normal(0, 1);
  y ~ poisson_log(log(pop) + a + b * income);
}
