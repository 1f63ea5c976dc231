data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> school;
  vector[N] hours;
  array[N] int<lower=0, upper=1> pass;
}
parameters {
  vector[J] alpha;
  real beta;
}
model {
  alpha ~ normal(0, 5);
  beta ~ normal(0, 1);
  pass ~ bernoulli_logit(alpha[school] + beta * hours);
}
