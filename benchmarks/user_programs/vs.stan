data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> g; vector[N] x; vector[N] y; }
parameters { vector[J] a; vector[J] b; real<lower=0> sigma; }
model {
  a ~ normal(0, 100);
  b ~ normal(0, 10);
  y ~ normal(a[g] + b[g] .* x, sigma);
}
