// Linear regression with the QR reparameterisation as Stan's User's Guide writes it, with the
// rewrite stan_dp's refusal advises: Q_ast is each row's own predictors times R_ast_inverse, and
// R_ast (computed from all rows here) must be given a public value.  Rows: x, y.
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix[N, K] x;
  vector[N] y;
}
transformed data {
  matrix[K, K] R_ast = qr_thin_R(x) / sqrt(N - 1);
  matrix[K, K] R_ast_inverse = inverse(R_ast);
  matrix[N, K] Q_ast = x * R_ast_inverse;
}
parameters {
  real alpha;
  vector[K] theta;
  real<lower=0> sigma;
}
model {
  y ~ normal(Q_ast * theta + alpha, sigma);
}
generated quantities {
  vector[K] beta = R_ast_inverse * theta;
}
