data { int<lower=0> N; vector[N] beds; vector[N] staff; array[N] int<lower=0> y; }
parameters { real<lower=-20, upper=20> a; real<lower=-10, upper=10> b_beds; real<lower=-10, upper=10> b_staff; }
model { y ~ poisson_log(a + b_beds * beds + b_staff * staff); }
