data { int<lower=0> N; array[N] int<lower=0> K; array[N] int<lower=0> y; vector[N] dose; }
parameters { real a; real b; real<lower=0> phi; }
model {
  vector[N] mu = inv_logit(a + b * dose);
  a ~ normal(0, 5); b ~ normal(0, 5);
  y ~ beta_binomial(K, mu * phi, (1 - mu) * phi);
}
