// Test model: a parameter per row, so the dimension depends on N (refused).
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  vector[N] z;
}
model {
  z ~ normal(0, 1);
  y ~ normal(z, 1);
}
