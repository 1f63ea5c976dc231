// Log-linear (Dirichlet-multinomial) model of a categorical record, the S-4
// example of Ju, Awan, Gong, Rao (2022, supplement S-4, eqs. S3-S6).
// A record is (a[i], b[i, 1..K]) (row variables a, b); shared: I, J, K, alpha, alpha_cond.
//   p ~ Dirichlet(alpha),  q[i, k] ~ Dirichlet(alpha_cond)
//   a[n] ~ Categorical(p),  b[n, k] | a[n] ~ Categorical(q[a[n], k])
// The released statistic is the K two-way tables (a x b_k) with Laplace(2K/eps)
// noise per cell (S7-S9).  Record generator: a_new, b_new in generated quantities.
data {
  int<lower=0> N;                               // number of records
  int<lower=1> I;                               // levels of a
  int<lower=1> J;                               // levels of each b_k
  int<lower=1> K;                               // number of b variables (tables)
  array[N] int<lower=1, upper=I> a;
  array[N, K] int<lower=1, upper=J> b;
  vector<lower=0>[I] alpha;
  vector<lower=0>[J] alpha_cond;
}
parameters {
  simplex[I] p;
  array[I, K] simplex[J] q;
}
model {
  p ~ dirichlet(alpha);
  for (i in 1:I) {
    for (k in 1:K) {
      q[i, k] ~ dirichlet(alpha_cond);
    }
  }
  a ~ categorical(p);
  for (n in 1:N) {
    for (k in 1:K) {
      b[n, k] ~ categorical(q[a[n], k]);
    }
  }
}
generated quantities {
  array[N] int a_new;
  array[N, K] int b_new;
  for (n in 1:N) {
    a_new[n] = categorical_rng(p);
    for (k in 1:K) {
      b_new[n, k] = categorical_rng(q[a_new[n], k]);
    }
  }
}
