// Normal model with unknown mean and scale, written in terms of the summed
// sufficient statistics of the rows (exponential-family form, for
// stan_dp.StanExpFamilyModel and penalty_expfamily).
//
// Statistic (per row y_i):  s(y_i) = (y_i, y_i^2),   S = sum_i s(y_i),  K = 2.
// Source: Yildirim, "On the use of penalty MCMC for differential privacy"
// (shared/seeds/000_*.txt), Section 3.3, eq. (7): the log-likelihood is
//   sum_i normal_lpdf(y_i | mu, sigma)
//     = -N log(sigma) - N/2 log(2 pi) - (S[2] - 2 mu S[1] + N mu^2) / (2 sigma^2),
// i.e. n log g(theta) + phi(theta)' S with phi = (mu / sigma^2, -1 / (2 sigma^2)).
//
// Row data never enter this program: only the row count N and the (noisy)
// statistic S.  Clamp each row to [-c, c] in the Python statistic, then
// ||s(y_i)||_2 <= c * sqrt(1 + c^2) = clip (the per-row l2 bound B).
// Shared data: mu_loc, mu_scale (normal prior on mu), sigma_scale
// (half-normal prior on sigma).
data {
  int<lower=0> N;               // number of rows (public)
  vector[2] S;                  // (sum y_i, sum y_i^2); unconstrained on purpose
  real mu_loc;
  real<lower=0> mu_scale;
  real<lower=0> sigma_scale;
}
parameters {
  real mu;
  real<lower=0> sigma;
}
model {
  mu ~ normal(mu_loc, mu_scale);
  sigma ~ normal(0, sigma_scale);
  target += -N * (log(sigma) + 0.5 * log(2 * pi()))
            - (S[2] - 2 * mu * S[1] + N * square(mu)) / (2 * square(sigma));
}
