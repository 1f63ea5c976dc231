data { int<lower=0> N; vector[N] dist; vector[N] arsenic; array[N] int<lower=0, upper=1> switched; }
parameters { real<lower=-10, upper=10> a; real<lower=-10, upper=10> b_dist; real<lower=-10, upper=10> b_arsenic; }
model { switched ~ bernoulli_logit(a + b_dist * dist + b_arsenic * arsenic); }
