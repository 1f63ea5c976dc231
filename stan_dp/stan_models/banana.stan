// The banana model of Räisä (2021), Theorem 5 (seed 003).
//
// Prior: theta ~ Ban(0, sigma0^2 I, a, b, m), i.e. g^{-1}(theta) ~ N(0, sigma0^2 I)
// with g^{-1}(y) = (y1, y2 + a (y1 - m)^2 + b, y3, ..., yd); the Jacobian of
// g^{-1} is 1.  Likelihood, for every row j:
//   x[j, 1] ~ N(theta1, sigma[1]),  x[j, 2] ~ N(theta2 + a (theta1 - m)^2 + b, sigma[2]),
//   x[j, k] ~ N(theta_k, sigma[k]) for k >= 3.
// The posterior (tempered by T) is again a banana distribution (Theorem 5).
// Row variable (sliced per data row): x.  Shared: d, a, b, m, sigma0, sigma.
// Note sigma0 and sigma are standard deviations (the thesis states variances).
data {
  int<lower=0> N;               // number of rows (the unit of privacy)
  int<lower=2> d;               // dimension
  matrix[N, d] x;               // observations, one row per record
  real a;                       // banana curvature (Fig. 2.1: 20)
  real b;                       // banana shift (Fig. 2.1: 0)
  real m;                       // banana centre (Fig. 2.1: 0)
  real<lower=0> sigma0;         // prior sd (Fig. 2.1: sqrt(1000))
  vector<lower=0>[d] sigma;     // observation sds (Fig. 2.1: sqrt(20), sqrt(2.5); others 1)
}
parameters {
  vector[d] theta;
}
transformed parameters {
  vector[d] z = theta;          // g^{-1}(theta): a function of theta only
  z[2] = theta[2] + a * square(theta[1] - m) + b;
}
model {
  z ~ normal(0, sigma0);
  for (k in 1:d) {
    col(x, k) ~ normal(z[k], sigma[k]);
  }
}
