// Linear regression with random predictors, written record by record for data
// augmentation: the S-5 example of Ju, Awan, Gong, Rao (2022, supplement S-5).
// A record is (X[i], y[i]) (row variables X, y); shared: D, m, sigma, tau.
//   X[i] ~ N_D(m, I)                      (predictor model, m known)
//   y[i] ~ N(beta[1] + X[i] * beta[2:], sigma)   (sigma known; S-5 uses sigma^2 = 2)
//   beta ~ N(0, tau^2 I_{D+1})            (S-5 uses tau = 2)
// Record generator for stan_dp.dp_augmented_sample: (X_new[i], y_new[i]) ~ f(. | beta)
// in generated quantities (Algorithm 1, step 2a).
data {
  int<lower=0> N;            // number of records
  int<lower=1> D;            // number of predictors
  matrix[N, D] X;            // predictors
  vector[N] y;               // outcomes
  vector[D] m;               // predictor mean
  real<lower=0> sigma;       // noise sd
  real<lower=0> tau;         // prior sd of every coefficient
}
parameters {
  vector[D + 1] beta;        // intercept, then slopes
}
model {
  beta ~ normal(0, tau);
  to_vector(X) ~ normal(to_vector(rep_matrix(m', N)), 1);
  y ~ normal_id_glm(X, beta[1], beta[2:], sigma);
}
generated quantities {
  matrix[N, D] X_new;
  vector[N] y_new;
  for (i in 1:N) {
    for (d in 1:D) {
      X_new[i, d] = normal_rng(m[d], 1);
    }
    y_new[i] = normal_rng(beta[1] + X_new[i] * beta[2:], sigma);
  }
}
