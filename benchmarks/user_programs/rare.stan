data { int<lower=0> N; vector[N] dose; vector[N] weight; array[N] int<lower=0, upper=1> event; }
parameters { real a; real b_dose; real b_weight; }
model {
  a ~ normal(0, 10); b_dose ~ normal(0, 2.5); b_weight ~ normal(0, 2.5);
  event ~ bernoulli_logit(a + b_dose * dose + b_weight * weight);
}
