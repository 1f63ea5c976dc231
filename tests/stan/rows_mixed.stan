// Test model: row variables of several kinds and constrained parameters.
// Row variables: u (array of vectors), g (ints), Z (matrix rows).
// Shared: K, w (a vector whose length is not N).
data {
  int<lower=0> N;
  int<lower=1> K;
  array[N] vector[2] u;
  array[N] int<lower=1, upper=K> g;
  matrix[N, 3] Z;
  vector[K] w;
}
transformed data {
  print("rows_mixed transformed data");
}
parameters {
  simplex[K] p;
  real<lower=0> s;
  vector[3] c;
  cholesky_factor_corr[2] L;
}
transformed parameters {
  real c_sum = sum(c);
}
model {
  c ~ normal(0, 1);
  s ~ lognormal(0, 1);
  L ~ lkj_corr_cholesky(2);
  p ~ dirichlet(rep_vector(2, K));
  g ~ categorical(p);
  for (i in 1:N) {
    u[i] ~ multi_normal_cholesky([Z[i] * c, w[g[i]]]', diag_pre_multiply(rep_vector(s, 2), L));
  }
}
generated quantities {
  real draw = normal_rng(c[1], s);
}
