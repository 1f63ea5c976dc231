data { int<lower=0> N; vector[N] age; vector[N] income; array[N] int<lower=0, upper=1> y; }
parameters { real a; real b_age; real b_inc; real b_int; }
model {
  a ~ normal(0, 10); b_age ~ normal(0, 1); b_inc ~ normal(0, 1); b_int ~ normal(0, 0.1);
  y ~ bernoulli_logit(a + b_age * age + b_inc * income + b_int * age .* income);
}
