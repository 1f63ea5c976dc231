// Robust regression as users write it: spending on household income, both in
// dollars, a Student-t likelihood with unknown degrees of freedom, wide priors.
// Rows: income, spend.
data {
  int<lower=1> N;
  vector[N] income;
  vector[N] spend;
}
parameters {
  real alpha;
  real beta;
  real<lower=0> sigma;
  real<lower=1> nu;
}
model {
  alpha ~ normal(0, 10000);
  beta ~ normal(0, 1);
  sigma ~ exponential(0.0001);
  nu ~ gamma(2, 0.1);
  spend ~ student_t(nu, alpha + beta * income, sigma);
}
