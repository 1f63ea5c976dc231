data { int<lower=0> N; vector[N] years; vector[N] female; vector[N] salary; }
parameters { real alpha; real b_years; real b_female; real<lower=0> sigma; }
model {
  alpha ~ normal(50000, 20000);
  b_years ~ student_t(3, 0, 5000);
  b_female ~ student_t(3, 0, 5000);
  sigma ~ exponential(1.0 / 10000);
  salary ~ normal(alpha + b_years * years + b_female * female, sigma);
}
