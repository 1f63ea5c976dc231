data {
  int<lower=0> N;
  vector[N] income;      // dollars
  vector<lower=0>[N] spend;
}
parameters {
  real a_p; real b_p;
  real a_m; real b_m;
  real<lower=0> sigma;
}
model {
  a_p ~ normal(0, 5); b_p ~ normal(0, 1);
  a_m ~ normal(0, 10); b_m ~ normal(0, 1);
  sigma ~ exponential(1);
  for (n in 1:N) {
    if (spend[n] == 0) {
      target += bernoulli_logit_lpmf(1 | a_p + b_p * income[n] / 10000);
    } else {
      target += bernoulli_logit_lpmf(0 | a_p + b_p * income[n] / 10000)
                + lognormal_lpdf(spend[n] | a_m + b_m * income[n] / 10000, sigma);
    }
  }
}
