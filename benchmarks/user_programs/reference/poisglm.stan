// ../poisglm.stan, exactly reparametrised for its non-private NUTS reference only
// (benchmarks/user_programs.py fits this twin where one exists; the private fits run the
// program as written).  The predictors are centred and scaled by their own means and sds
// (data only: no privacy question, the reference reads the raw rows anyway), and the
// program's (alpha, beta) are recovered exactly: alpha + X beta = alpha_c + Z beta_z with
// beta = beta_z ./ s and alpha = alpha_c - m * beta.  The map is linear, so its Jacobian is
// constant and the priors on alpha and beta need no adjustment: the posterior of (alpha, beta)
// is the program's.  Why: an income in dollars leaves beta[1] a posterior sd of 5.6e-7, below
// the 1e-3 that Stan's warm-up adds to every adapted variance, so NUTS on the program as
// written gave R-hat 2.34 (diag_e) and 2.12 (dense_e), every chain started at 0.
data { int<lower=0> N; int<lower=1> K; matrix[N, K] X; array[N] int<lower=0> y; }
transformed data {
  row_vector[K] m;
  row_vector[K] s;
  matrix[N, K] Z;
  for (k in 1:K) {
    m[k] = mean(X[, k]);
    s[k] = sd(X[, k]);
    Z[, k] = (X[, k] - m[k]) / s[k];
  }
}
parameters { real alpha_c; vector[K] beta_z; }
transformed parameters {
  vector[K] beta = beta_z ./ s';
  real alpha = alpha_c - m * beta;
}
model {
  target += normal_lpdf(alpha | 0, 5);
  target += normal_lpdf(beta | 0, 1);
  y ~ poisson_log_glm(Z, alpha_c, beta_z);
}
