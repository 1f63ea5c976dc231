data {
  int<lower=0> N;
  vector[N] visits_prior;   // count, 0-40
  vector[N] age;            // years
  vector<lower=0>[N] months; // follow-up months
  array[N] int<lower=0> visits;
}
parameters {
  real a; real b_prior; real b_age; real<lower=0> phi;
}
model {
  a ~ normal(0, 5); b_prior ~ normal(0, 1); b_age ~ normal(0, 1); phi ~ exponential(1);
  visits ~ neg_binomial_2_log(log(months) + a + b_prior * visits_prior + b_age * age, phi);
}
