// Headers shared by every stan_dp model library.  toolchain.py compiles this
// file once per toolchain and flag set into a GCC precompiled header and
// force-includes it (`-include`) before the bridge and the model.
#ifndef STAN_DP_PCH_HPP
#define STAN_DP_PCH_HPP
#include <stan/model/model_header.hpp>
#include <stan/io/empty_var_context.hpp>
#include <stan/io/json/json_data.hpp>
#include <stan/services/util/create_rng.hpp>
#include <stan/version.hpp>
#include <stan/math/rev/functor/finite_diff_hessian_auto.hpp>
#include <stan/math/rev/functor/finite_diff_hessian_times_vector_auto.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>
#include <iostream>
#include <thread>
#endif
