// Generated quantities of both kinds: sigma2 and y_new (a prediction at the
// shared covariate value x_new, with Stan's RNG) come from the parameters and
// shared data alone (returned with the draws); log_lik and mean_mu read the
// rows (left out).  With summarise = 1, mean_mu is a mean over the rows, which
// throws where there are none: then no generated quantity can be computed
// without the rows.  Rows: x, y.
data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
  real x_new;
  int<lower=0, upper=1> summarise;
}
parameters {
  real a;
  real b;
  real<lower=0> sigma;
}
transformed parameters {
  vector[N] mu = a + b * x;
}
model {
  a ~ normal(0, 10);
  b ~ normal(0, 10);
  sigma ~ normal(0, 5);
  y ~ normal(mu, sigma);
}
generated quantities {
  real sigma2 = square(sigma);
  real y_new = normal_rng(a + b * x_new, sigma);
  vector[N] log_lik;
  for (n in 1:N) {
    log_lik[n] = normal_lpdf(y[n] | mu[n], sigma);
  }
  real mean_mu = summarise ? mean(mu) : 0;
}
