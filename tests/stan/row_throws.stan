// Test model: one row's data value makes its likelihood throw an exception
// that is not Stan's reject (std::domain_error).  k[i] in {1, 2} is a normal
// row (y[i] ~ normal(mu, 1)); k[i] > 2 indexes past w (std::out_of_range);
// k[i] < 1 gives dot_product a vector of the wrong size
// (std::invalid_argument).  Neither depends on the parameters, only on the
// row.  The shared value j does the same to the prior when it is not 1 or 2.
data {
  int<lower=0> N;
  array[N] int k;
  vector[N] y;
  int j;
}
parameters {
  real mu;
}
model {
  vector[2] w = [1, 1]';
  mu ~ normal(0, 10 * w[j]);
  for (i in 1:N) {
    if (k[i] >= 1) {
      y[i] ~ normal(mu * w[k[i]], 1);
    } else {
      y[i] ~ normal(mu * dot_product(w, rep_vector(1, -k[i])), 1);
    }
  }
}
