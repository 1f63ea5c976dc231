data {
  int<lower=0> N;
  vector[N] age;       // years
  vector[N] income;    // thousands of dollars
  array[N] int<lower=0, upper=1> bought;
}
parameters {
  real a; real b_age; real b_inc; real b_int;
}
model {
  a ~ normal(0, 5); b_age ~ normal(0, 1); b_inc ~ normal(0, 1); b_int ~ normal(0, 0.1);
  bought ~ bernoulli_logit(a + b_age * age + b_inc * income + b_int * age .* income);
}
