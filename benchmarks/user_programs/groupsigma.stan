data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> lab;
  vector[N] dose;   // mg
  vector[N] y;
}
parameters {
  real alpha;
  real beta;
  vector<lower=0>[J] sigma;
}
model {
  y ~ normal(alpha + beta * dose, sigma[lab]);
}
