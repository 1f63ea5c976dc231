data { int<lower=0> N; int<lower=1> J; array[N] int<lower=1, upper=J> player1; array[N] int<lower=1, upper=J> player2; array[N] int<lower=0, upper=1> win1; }
parameters { vector[J] ability; }
model {
  ability ~ normal(0, 2);
  win1 ~ bernoulli_logit(ability[player1] - ability[player2]);
}
