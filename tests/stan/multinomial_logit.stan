// Multinomial logit as users write it: a travel-mode choice on age in years and distance in km,
// base shares on a simplex with a Dirichlet prior, wide priors on the slopes, age not centred.
// Rows: age, km, choice.
data {
  int<lower=1> N;
  vector[N] age;
  vector[N] km;
  array[N] int<lower=1, upper=4> choice;
}
parameters {
  simplex[4] base_share;
  vector[3] b_age;
  vector[3] b_km;
}
model {
  base_share ~ dirichlet(rep_vector(2, 4));
  b_age ~ normal(0, 1);
  b_km ~ normal(0, 1);
  for (n in 1:N) {
    vector[4] eta = log(base_share) + append_row(0, b_age * age[n] + b_km * km[n]);
    choice[n] ~ categorical_logit(eta);
  }
}
