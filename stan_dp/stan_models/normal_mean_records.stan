// Normal mean with a known sd, written record by record for data augmentation.
// Records: y (row variable, sliced per row); shared: mu0, tau, sigma.
// Record generator for stan_dp.dp_augmented_sample: y_new[i] ~ f(. | mu), one
// fresh record per row, drawn in generated quantities (Ju, Awan, Gong, Rao 2022,
// Algorithm 1, step 2a: the independent proposal x_i* ~ f(. | theta)).
data {
  int<lower=0> N;            // number of records
  vector[N] y;               // records
  real mu0;                  // prior mean
  real<lower=0> tau;         // prior sd
  real<lower=0> sigma;       // known record sd
}
parameters {
  real mu;
}
model {
  mu ~ normal(mu0, tau);
  y ~ normal(mu, sigma);
}
generated quantities {
  array[N] real y_new = normal_rng(rep_vector(mu, N), sigma);
}
