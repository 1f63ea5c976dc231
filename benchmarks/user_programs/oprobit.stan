data { int<lower=0> N; vector[N] age; array[N] int<lower=1, upper=4> y; }
parameters { real b; ordered[3] c; }
model { b ~ normal(0, 1); y ~ ordered_probit(b * age, c); }
