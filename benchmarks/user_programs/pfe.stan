data {
  int<lower=0> N;
  int<lower=1> J;
  array[N] int<lower=1, upper=J> region;
  vector[N] temp;
  array[N] int<lower=0> calls;
}
parameters {
  vector[J] a;
  real b;
}
model {
  for (n in 1:N)
    calls[n] ~ poisson_log(a[region[n]] + b * temp[n]);
}
