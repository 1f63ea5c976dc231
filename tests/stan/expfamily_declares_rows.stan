// Test model: declares the row variable y as data, which an exponential-family
// model must not do (the rows are never passed to the Stan program).
data {
  int<lower=0> N;
  vector[N] y;
  vector[1] S;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 1);
  target += mu * S[1] - 0.5 * N * square(mu);
}
