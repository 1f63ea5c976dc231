// stan_dp reference-fit service: Stan's own NUTS (diagonal or dense metric,
// adapted warm-up) run in-process, for the non-private reference fits.
//
// This translation unit does not include a model.  It calls the factory
// `new_model` that every stanc-generated model defines, and is linked with
// bridge.cpp + the model into a separate "reference" variant of the model
// library (toolchain.compile_model(..., variant="reference")).  Because it
// depends on no model, toolchain.py compiles it once per toolchain into an
// object file and links that object into every reference library.
//
// Exported C ABI (no C++ exception crosses it):
//
//   int sdp_nuts(data, seed, chains, warmup, draws, options, threads,
//                stop, progress, &n_cols, &header, &values, &messages,
//                &error_msg)
//
// runs `chains` chains of stan::services::sample::hmc_nuts_diag_e_adapt (or
// hmc_nuts_dense_e_adapt where the options' `dense` is nonzero) with
// chain ids 1..chains and the one `seed` (Stan derives each chain's stream
// from seed and chain id, exactly as CmdStan does for a multi-chain run),
// warm-up draws saved.  On success it returns 0 and hands back malloc'ed
// buffers that the caller releases with sdp_free:
//   header    comma-separated column names (lp__, accept_stat__, ..., then
//             every constrained parameter, transformed parameter and
//             generated quantity, Stan's flattened names);
//   values    chains x (warmup + draws) x n_cols doubles, row-major;
//   messages  the samplers' log (warnings, model print output), one per line.
// On failure it returns -1 (-2 if the model cannot be built from the data)
// and *error_msg holds the reason.

#include <stan/callbacks/interrupt.hpp>
#include <stan/callbacks/logger.hpp>
#include <stan/callbacks/writer.hpp>
#include <stan/io/empty_var_context.hpp>
#include <stan/io/json/json_data.hpp>
#include <stan/model/model_base.hpp>
#include <stan/services/sample/hmc_nuts_dense_e_adapt.hpp>
#include <stan/services/sample/hmc_nuts_diag_e_adapt.hpp>
#include <stan/version.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// Defined by the stanc-generated model compiled into the same library.
stan::model::model_base& new_model(stan::io::var_context& data_context,
                                   unsigned int seed, std::ostream* msg_stream);

namespace stan_dp_services {

constexpr int kDataError = -2;

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

/// Collects the header and every draw of one chain in memory.
class draws_writer : public stan::callbacks::writer {
 public:
  draws_writer(std::int64_t* progress) : progress_(progress) {}

  void operator()(const std::vector<std::string>& names) override { names_ = names; }

  void operator()(const std::vector<double>& state) override {
    values_.insert(values_.end(), state.begin(), state.end());
    ++rows_;
    if (progress_ != nullptr) __atomic_store_n(progress_, rows_, __ATOMIC_RELAXED);
  }

  const std::vector<std::string>& names() const { return names_; }
  const std::vector<double>& values() const { return values_; }
  std::int64_t rows() const { return rows_; }

 private:
  std::vector<std::string> names_;
  std::vector<double> values_;
  std::int64_t rows_ = 0;
  std::int64_t* progress_;
};

/// Keeps the sampler's messages (bounded, so a model that prints on every
/// evaluation cannot exhaust memory).
class collecting_logger : public stan::callbacks::logger {
 public:
  explicit collecting_logger(int chain) : prefix_("chain " + std::to_string(chain) + ": ") {}

  void debug(const std::string&) override {}
  void debug(const std::stringstream&) override {}
  void info(const std::string& m) override { add("", m); }
  void info(const std::stringstream& m) override { add("", m.str()); }
  void warn(const std::string& m) override { add("warning: ", m); }
  void warn(const std::stringstream& m) override { add("warning: ", m.str()); }
  void error(const std::string& m) override { add("error: ", m); errors_ += m + "\n"; }
  void error(const std::stringstream& m) override { error(m.str()); }
  void fatal(const std::string& m) override { add("fatal: ", m); errors_ += m + "\n"; }
  void fatal(const std::stringstream& m) override { fatal(m.str()); }

  std::string text() const {
    std::string out = text_;
    if (dropped_ > 0)
      out += prefix_ + "(" + std::to_string(dropped_) + " more messages not kept)\n";
    return out;
  }
  const std::string& errors() const { return errors_; }

 private:
  static constexpr int kMaxMessages = 200;

  void add(const char* level, const std::string& m) {
    if (m.empty()) return;
    if (kept_ >= kMaxMessages) {
      ++dropped_;
      return;
    }
    ++kept_;
    text_ += prefix_ + level + m;
    if (text_.back() != '\n') text_ += '\n';
  }

  std::string prefix_;
  std::string text_;
  std::string errors_;
  int kept_ = 0;
  long dropped_ = 0;
};

/// Stops a chain when the caller sets *stop (e.g. on Ctrl-C in Python).
class flag_interrupt : public stan::callbacks::interrupt {
 public:
  explicit flag_interrupt(const int* stop) : stop_(stop) {}
  void operator()() override {
    if (stop_ != nullptr && __atomic_load_n(stop_, __ATOMIC_RELAXED) != 0)
      throw std::runtime_error("interrupted");
  }

 private:
  const int* stop_;
};

/// NUTS settings, in the order of the `options` array of sdp_nuts; `dense`
/// nonzero selects the dense metric (CmdStan's metric=dense_e), else diag_e.
struct nuts_options {
  double init_radius, stepsize, stepsize_jitter, max_depth, delta, gamma, kappa,
      t0, init_buffer, term_buffer, window, dense;
  static constexpr int kCount = 12;
};

struct chain_result {
  std::unique_ptr<draws_writer> writer;
  std::unique_ptr<collecting_logger> logger;
  int return_code = -1;
  std::string failure;
};

void run_chain(stan::model::model_base& model, unsigned int seed, unsigned int chain_id,
               int warmup, int draws, const nuts_options& o, const int* stop,
               chain_result& out) {
  try {
    // This thread's autodiff stack (a no-op if the thread already has one).
    stan::math::ChainableStack autodiff_stack;
    stan::io::empty_var_context init;  // random inits, uniform(-R, R) unconstrained
    flag_interrupt interrupt(stop);
    stan::callbacks::writer init_writer;
    stan::callbacks::writer diagnostic_writer;
    stan::callbacks::structured_writer metric_writer;
    // The overloads without an initial metric start from the unit metric, as
    // CmdStan does without metric_file; both take the same arguments.
    const auto depth = static_cast<int>(o.max_depth);
    const auto init_buffer = static_cast<unsigned int>(o.init_buffer);
    const auto term_buffer = static_cast<unsigned int>(o.term_buffer);
    const auto window = static_cast<unsigned int>(o.window);
    if (o.dense != 0.0)
      out.return_code = stan::services::sample::hmc_nuts_dense_e_adapt(
          model, init, seed, chain_id, o.init_radius, warmup, draws, /*num_thin=*/1,
          /*save_warmup=*/true, /*refresh=*/0, o.stepsize, o.stepsize_jitter, depth, o.delta,
          o.gamma, o.kappa, o.t0, init_buffer, term_buffer, window, interrupt, *out.logger,
          init_writer, *out.writer, diagnostic_writer, metric_writer);
    else
      out.return_code = stan::services::sample::hmc_nuts_diag_e_adapt(
          model, init, seed, chain_id, o.init_radius, warmup, draws, /*num_thin=*/1,
          /*save_warmup=*/true, /*refresh=*/0, o.stepsize, o.stepsize_jitter, depth, o.delta,
          o.gamma, o.kappa, o.t0, init_buffer, term_buffer, window, interrupt, *out.logger,
          init_writer, *out.writer, diagnostic_writer, metric_writer);
  } catch (const std::exception& e) {
    out.failure = e.what();
  } catch (...) {
    out.failure = "unknown error";
  }
}

}  // namespace stan_dp_services

extern "C" {

void sdp_free(void* p) { std::free(p); }

/// The number of doubles sdp_nuts reads from `options` (the binding checks it).
int sdp_nuts_option_count() { return stan_dp_services::nuts_options::kCount; }

/// The Stan version these services were built with, "major.minor.patch".
const char* sdp_stan_version() {
  static const std::string v = stan::MAJOR_VERSION + "." + stan::MINOR_VERSION + "." +
                               stan::PATCH_VERSION;
  return v.c_str();
}

int sdp_nuts(const char* data_json, unsigned int seed, int chains, int warmup, int draws,
             const double* options, int threads, const int* stop, std::int64_t* progress,
             int* n_cols, char** header, double** values, char** messages,
             char** error_msg) {
  using namespace stan_dp_services;
  if (header) *header = nullptr;
  if (values) *values = nullptr;
  if (messages) *messages = nullptr;
  if (error_msg) *error_msg = nullptr;
  auto fail = [&](const std::string& m) {
    if (error_msg) *error_msg = copy_string(m);
    return -1;
  };
  if (n_cols == nullptr || header == nullptr || values == nullptr || messages == nullptr)
    return fail("sdp_nuts: null output pointer");
  if (chains < 1 || warmup < 0 || draws < 1 || options == nullptr)
    return fail("sdp_nuts: bad chains, warmup, draws or options");
  nuts_options o;
  std::memcpy(&o, options, sizeof(double) * nuts_options::kCount);
  try {
    stan::math::ChainableStack autodiff_stack;
    std::ostringstream model_msgs;
    std::unique_ptr<stan::model::model_base> model;
    try {
      std::unique_ptr<stan::io::var_context> data;
      if (data_json == nullptr || data_json[0] == '\0') {
        data = std::make_unique<stan::io::empty_var_context>();
      } else {
        std::istringstream in(data_json);
        data = std::make_unique<stan::json::json_data>(in);
      }
      model.reset(&new_model(*data, seed, &model_msgs));
    } catch (const std::exception& e) {
      fail(e.what());
      return kDataError;
    }

    std::vector<chain_result> results(chains);
    for (int c = 0; c < chains; ++c) {
      results[c].writer = std::make_unique<draws_writer>(progress ? progress + c : nullptr);
      results[c].logger = std::make_unique<collecting_logger>(c + 1);
    }
    // Chains in batches of `threads`; each chain has its own writer, logger
    // and autodiff stack, the (const) model is shared, as in Stan's own
    // multi-chain service.
    const int batch = threads < 1 ? 1 : threads;
    for (int first = 0; first < chains; first += batch) {
      const int last = std::min(chains, first + batch);
      if (last - first == 1) {
        run_chain(*model, seed, first + 1, warmup, draws, o, stop, results[first]);
        continue;
      }
      std::vector<std::thread> pool;
      for (int c = first; c < last; ++c)
        pool.emplace_back(run_chain, std::ref(*model), seed, static_cast<unsigned>(c + 1),
                          warmup, draws, std::cref(o), stop, std::ref(results[c]));
      for (auto& t : pool) t.join();
    }

    std::string log = model_msgs.str();
    if (!log.empty() && log.back() != '\n') log += '\n';
    std::string errors;
    for (int c = 0; c < chains; ++c) {
      log += results[c].logger->text();
      const auto& r = results[c];
      const std::string why = !r.failure.empty() ? r.failure : r.logger->errors();
      if (r.return_code != 0)
        errors += "chain " + std::to_string(c + 1) + ": " +
                  (why.empty() ? "sampler failed" : why) + "\n";
    }
    if (stop != nullptr && __atomic_load_n(stop, __ATOMIC_RELAXED) != 0)
      return fail("interrupted");
    if (!errors.empty()) return fail(errors + log);

    const auto& names = results[0].writer->names();
    const std::int64_t rows = static_cast<std::int64_t>(warmup) + draws;
    for (int c = 0; c < chains; ++c) {
      const auto& w = *results[c].writer;
      if (w.names() != names || w.rows() != rows ||
          w.values().size() != static_cast<size_t>(rows) * names.size())
        return fail("chain " + std::to_string(c + 1) + " wrote an unexpected number of draws");
    }
    std::string joined;
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) joined += ',';
      joined += names[i];
    }
    const size_t per_chain = static_cast<size_t>(rows) * names.size();
    double* out = static_cast<double*>(std::malloc(sizeof(double) * per_chain * chains + 1));
    char* head = copy_string(joined);
    char* msgs = copy_string(log);
    if (out == nullptr || head == nullptr || msgs == nullptr) {
      std::free(out);
      std::free(head);
      std::free(msgs);
      return fail("out of memory");
    }
    for (int c = 0; c < chains; ++c)
      std::memcpy(out + c * per_chain, results[c].writer->values().data(),
                  sizeof(double) * per_chain);
    *n_cols = static_cast<int>(names.size());
    *header = head;
    *values = out;
    *messages = msgs;
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("sdp_nuts: ") + e.what());
  } catch (...) {
    return fail("sdp_nuts: unknown error");
  }
}

}  // extern "C"
