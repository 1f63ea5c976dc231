// stan_dp native bridge.
//
// Compiled in one translation unit together with a stanc-generated model
// (included through the STAN_DP_MODEL_HPP macro).  It exports
//
//   1. the C ABI of BridgeStan 2.6 (bs_*), so that the `bridgestan` Python
//      package can load the library and every one of its methods works;
//   2. the stan_dp row extension (sdp_*): per-row model instances built once
//      from the full data, and batched per-row log-likelihood values and
//      gradients, multi-threaded with TBB, bit-identical for any thread count.
//
// Error convention (as BridgeStan documents it): functions that can fail
// return 0 on success and -1 (or a null pointer) on failure; on failure, if
// `error_msg` is not null, *error_msg receives a malloc'ed message that the
// caller releases with bs_free_error_msg.  No C++ exception crosses the C
// boundary.

// The Stan headers come first through `-include stan_dp_pch.hpp` (see
// toolchain.py), precompiled once per toolchain when possible.
#include STAN_DP_MODEL_HPP

#include <algorithm>
#include <map>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef STAN_DP_VERSION
#define STAN_DP_VERSION "unknown"
#endif

namespace stan_dp_native {

// ---------------------------------------------------------------- helpers --

/// Copy a message into a malloc'ed C string owned by the caller.
inline void set_error(char** error_msg, const std::string& msg) {
  if (error_msg == nullptr) return;
  *error_msg = static_cast<char*>(std::malloc(msg.size() + 1));
  if (*error_msg != nullptr) std::memcpy(*error_msg, msg.c_str(), msg.size() + 1);
}

/// Give the calling thread its own autodiff stack (threads created by
/// Python or TBB may not have one yet).  Idempotent per thread.
inline void ensure_autodiff_stack() {
  static thread_local stan::math::ChainableStack thread_stack;
  (void)thread_stack;
}

/// Output stream used for the model's print() statements.
class callback_buf : public std::streambuf {
 public:
  using callback_t = void (*)(const char*, int);
  explicit callback_buf(callback_t cb) : cb_(cb) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    cb_(s, static_cast<int>(n));
    return n;
  }
  int overflow(int c) override {
    if (c != EOF) {
      char ch = static_cast<char>(c);
      cb_(&ch, 1);
    }
    return c;
  }

 private:
  callback_t cb_;
};

std::mutex print_mutex;
std::unique_ptr<callback_buf> print_buf;
std::unique_ptr<std::ostream> print_stream;
std::ostream* outstream = &std::cout;

/// Read a data argument the way BridgeStan does: empty -> no data, a path
/// ending in ".json" -> that file, anything else -> a JSON document.
std::unique_ptr<stan::io::var_context> make_data_context(const char* data) {
  if (data == nullptr || data[0] == '\0') {
    return std::make_unique<stan::io::empty_var_context>();
  }
  std::string s(data);
  if (s.size() >= 5 && s.compare(s.size() - 5, 5, ".json") == 0) {
    std::ifstream in(s);
    if (!in.good()) throw std::runtime_error("could not open data file " + s);
    return std::make_unique<stan::json::json_data>(in);
  }
  std::istringstream in(s);
  return std::make_unique<stan::json::json_data>(in);
}

/// The type of an exception, without its message.
///
/// Stan's messages quote the values they check ("index 150 out of range"),
/// so an exception raised while data are evaluated is reported by its type
/// only (see sdp_log_prior and sdp_row_log_lik).
const char* exception_kind(const std::exception& e) {
  if (dynamic_cast<const std::domain_error*>(&e)) return "std::domain_error";
  if (dynamic_cast<const std::out_of_range*>(&e)) return "std::out_of_range";
  if (dynamic_cast<const std::invalid_argument*>(&e)) return "std::invalid_argument";
  if (dynamic_cast<const std::length_error*>(&e)) return "std::length_error";
  if (dynamic_cast<const std::logic_error*>(&e)) return "std::logic_error";
  if (dynamic_cast<const std::overflow_error*>(&e)) return "std::overflow_error";
  if (dynamic_cast<const std::range_error*>(&e)) return "std::range_error";
  if (dynamic_cast<const std::runtime_error*>(&e)) return "std::runtime_error";
  if (dynamic_cast<const std::bad_alloc*>(&e)) return "std::bad_alloc";
  return "std::exception";
}

/// The message of an exception raised by the prior (zero-row) part.
///
/// That part depends on the shared data only, never on a row, so the call
/// may fail; but the message names the exception's type only, because
/// Stan's own text can quote data values.
std::string withheld_message(const char* where, const char* kind) {
  return std::string("the prior part of the model (no rows) threw ") + kind + " in "
         + where + "; Stan's message is withheld because it may quote data values "
         "(evaluate the model outside stan_dp, e.g. with RowModel.bridge, to see it)";
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
  }
  return out;
}

/// log density with the concrete model type (no virtual dispatch).
template <bool propto, bool jacobian>
double log_density_value(const stan_model& m, const Eigen::VectorXd& x,
                         std::ostream* msgs) {
  if (propto) {
    // With doubles Stan drops every term under propto; use autodiff types.
    stan::math::nested_rev_autodiff nested;
    Eigen::Matrix<stan::math::var, -1, 1> xv = x.cast<stan::math::var>();
    return m.template log_prob<true, jacobian>(xv, msgs).val();
  }
  Eigen::VectorXd xc = x;
  return m.template log_prob<false, jacobian>(xc, msgs);
}

template <bool propto, bool jacobian>
double log_density_grad(const stan_model& m, const Eigen::VectorXd& x,
                        double* grad, std::ostream* msgs) {
  stan::math::nested_rev_autodiff nested;
  const Eigen::Index d = x.size();
  Eigen::Matrix<stan::math::var, -1, 1> xv(d);
  for (Eigen::Index k = 0; k < d; ++k) xv.coeffRef(k) = x.coeff(k);
  stan::math::var lp = m.template log_prob<propto, jacobian>(xv, msgs);
  lp.grad();
  for (Eigen::Index k = 0; k < d; ++k) grad[k] = xv.coeff(k).adj();
  return lp.val();
}

/// Runtime dispatch over the (propto, jacobian) template flags.
double value_dispatch(const stan_model& m, bool propto, bool jacobian,
                      const Eigen::VectorXd& x, std::ostream* msgs) {
  if (propto)
    return jacobian ? log_density_value<true, true>(m, x, msgs)
                    : log_density_value<true, false>(m, x, msgs);
  return jacobian ? log_density_value<false, true>(m, x, msgs)
                  : log_density_value<false, false>(m, x, msgs);
}

double grad_dispatch(const stan_model& m, bool propto, bool jacobian,
                     const Eigen::VectorXd& x, double* grad,
                     std::ostream* msgs) {
  if (propto)
    return jacobian ? log_density_grad<true, true>(m, x, grad, msgs)
                    : log_density_grad<true, false>(m, x, grad, msgs);
  return jacobian ? log_density_grad<false, true>(m, x, grad, msgs)
                  : log_density_grad<false, false>(m, x, grad, msgs);
}

/// Functor for Stan Math's finite-difference Hessian helpers.
struct log_density_functor {
  const stan_model& model;
  bool propto;
  bool jacobian;
  std::ostream* msgs;
  template <typename T>
  T operator()(const Eigen::Matrix<T, -1, 1>& x) const {
    auto& xm = const_cast<Eigen::Matrix<T, -1, 1>&>(x);
    if (propto)
      return jacobian ? model.template log_prob<true, true>(xm, msgs)
                      : model.template log_prob<true, false>(xm, msgs);
    return jacobian ? model.template log_prob<false, true>(xm, msgs)
                    : model.template log_prob<false, false>(xm, msgs);
  }
};

// --------------------------------------------------------- row slicing --

/// A data context that shows one row (or no row) of a full data context.
///
/// Variables named in `sliced` have the row count as their leading
/// dimension; they are shown as the slice for the current row (leading
/// dimension 1) or as empty (leading dimension 0).  The row-count variable
/// reads 1 or 0.  Every other variable is passed through unchanged.
/// Values are column-major, as in every Stan var_context.
class row_context : public stan::io::var_context {
 public:
  row_context(const stan::io::var_context& full, std::string rows_var,
              std::vector<std::string> sliced, size_t n_rows)
      : full_(full),
        rows_var_(std::move(rows_var)),
        sliced_(std::move(sliced)),
        n_(n_rows) {
    // The full context returns each variable by value: copy every row
    // variable once here, so that building n row instances costs O(n) and
    // not O(n^2).
    for (const auto& name : sliced_) {
      all_r_[name] = full_.vals_r(name);
      if (full_.contains_i(name)) all_i_[name] = full_.vals_i(name);
    }
  }

  /// Show row `i`; a negative index shows no rows at all.
  void set_row(long i) { row_ = i; }

  bool contains_r(const std::string& name) const override {
    return full_.contains_r(name);
  }
  bool contains_i(const std::string& name) const override {
    return full_.contains_i(name);
  }
  std::vector<double> vals_r(const std::string& name) const override {
    if (name == rows_var_) return {static_cast<double>(row_ >= 0 ? 1 : 0)};
    if (!is_sliced(name)) return full_.vals_r(name);
    return slice(all_r_.at(name));
  }
  std::vector<std::complex<double>> vals_c(
      const std::string& name) const override {
    if (is_sliced(name))
      throw std::runtime_error("complex row variable '" + name
                               + "' is not supported");
    return full_.vals_c(name);
  }
  std::vector<int> vals_i(const std::string& name) const override {
    if (name == rows_var_) return {row_ >= 0 ? 1 : 0};
    if (!is_sliced(name)) return full_.vals_i(name);
    auto it = all_i_.find(name);
    if (it == all_i_.end()) return slice(full_.vals_i(name));  // lets the context report the error
    return slice(it->second);
  }
  std::vector<size_t> dims_r(const std::string& name) const override {
    return sliced_dims(name, full_.dims_r(name));
  }
  std::vector<size_t> dims_i(const std::string& name) const override {
    return sliced_dims(name, full_.dims_i(name));
  }
  void names_r(std::vector<std::string>& names) const override {
    full_.names_r(names);
  }
  void names_i(std::vector<std::string>& names) const override {
    full_.names_i(names);
  }
  void validate_dims(const std::string& stage, const std::string& name,
                     const std::string& base_type,
                     const std::vector<size_t>& dims_declared) const override {
    size_t expected = 1;
    for (size_t d : dims_declared) expected *= d;
    std::vector<size_t> dims = dims_r(name);
    size_t found = dims.empty() ? 0 : 1;
    for (size_t d : dims) found *= d;
    if (expected == 0 && found == 0) return;  // empty containers may be absent
    if (base_type == "int") {
      if (!contains_i(name)) {
        throw std::runtime_error(
            std::string(contains_r(name) ? "int variable contained non-int values"
                                         : "variable does not exist")
            + "; processing stage=" + stage + "; variable name=" + name
            + "; base type=" + base_type);
      }
    } else if (!contains_r(name)) {
      throw std::runtime_error("variable does not exist; processing stage="
                               + stage + "; variable name=" + name
                               + "; base type=" + base_type);
    }
    if (dims.size() != dims_declared.size() || dims != dims_declared) {
      std::stringstream msg;
      msg << "mismatch in dimension declared and found in context"
          << "; processing stage=" << stage << "; variable name=" << name
          << "; dims declared=";
      dims_msg(msg, dims_declared);
      msg << "; dims found=";
      dims_msg(msg, dims);
      throw std::runtime_error(msg.str());
    }
  }

 private:
  bool is_sliced(const std::string& name) const {
    return std::find(sliced_.begin(), sliced_.end(), name) != sliced_.end();
  }
  std::vector<size_t> sliced_dims(const std::string& name,
                                  std::vector<size_t> dims) const {
    if (name == rows_var_) return {};
    if (is_sliced(name) && !dims.empty()) dims[0] = row_ >= 0 ? 1 : 0;
    return dims;
  }
  template <typename T>
  std::vector<T> slice(const std::vector<T>& all) const {
    if (row_ < 0 || n_ == 0) return {};
    // Column-major: element (i, rest) sits at i + n * rest.
    const size_t inner = all.size() / n_;
    std::vector<T> out(inner);
    for (size_t r = 0; r < inner; ++r) out[r] = all[row_ + n_ * r];
    return out;
  }

  const stan::io::var_context& full_;
  std::string rows_var_;
  std::vector<std::string> sliced_;
  size_t n_;
  long row_ = -1;
  std::map<std::string, std::vector<double>> all_r_;
  std::map<std::string, std::vector<int>> all_i_;
};

}  // namespace stan_dp_native

using namespace stan_dp_native;

// ====================================================== BridgeStan ABI ===

extern "C" {

int bs_major_version = 2;
int bs_minor_version = 6;
int bs_patch_version = 2;

struct bs_model {
  stan_model* model = nullptr;
  std::string name;
  std::string info;
  std::string names[4];  // [include_tp + 2 * include_gq]
  int num[4] = {0, 0, 0, 0};
  std::string unc_names;
  int unc_num = 0;
};

struct bs_rng {
  stan::rng_t rng;
  explicit bs_rng(unsigned int seed) : rng(stan::services::util::create_rng(seed, 0)) {}
};

bs_model* bs_model_construct(const char* data, unsigned int seed,
                             char** error_msg) {
  try {
    auto context = make_data_context(data);
    std::unique_ptr<bs_model> m(new bs_model());
    m->model = new stan_model(*context, seed, outstream);
    m->name = m->model->model_name();
    std::ostringstream info;
    info << "BridgeStan version: " << bs_major_version << '.'
         << bs_minor_version << '.' << bs_patch_version << '\n'
         << "Built by stan_dp " << STAN_DP_VERSION
         << " (BridgeStan-compatible C ABI)\n"
         << "Stan version: " << stan::MAJOR_VERSION << '.'
         << stan::MINOR_VERSION << '.' << stan::PATCH_VERSION << '\n'
         << "Stan C++ Defines:\n"
#ifdef STAN_THREADS
         << "\tSTAN_THREADS=true\n"
#else
         << "\tSTAN_THREADS=false\n"
#endif
         << "\tSTAN_MPI=false\n\tSTAN_OPENCL=false\n\tSTAN_NO_RANGE_CHECKS=false\n"
         << "\tSTAN_CPP_OPTIMS=false\n"
         << "Stan Compiler Details:\n";
    for (const auto& line : m->model->model_compile_info()) info << '\t' << line << '\n';
    m->info = info.str();
    for (int tp = 0; tp < 2; ++tp) {
      for (int gq = 0; gq < 2; ++gq) {
        std::vector<std::string> names;
        m->model->constrained_param_names(names, tp == 1, gq == 1);
        m->names[tp + 2 * gq] = join_names(names);
        m->num[tp + 2 * gq] = static_cast<int>(names.size());
      }
    }
    std::vector<std::string> unc;
    m->model->unconstrained_param_names(unc, false, false);
    m->unc_names = join_names(unc);
    m->unc_num = static_cast<int>(m->model->num_params_r());
    return m.release();
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in bs_model_construct: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_model_construct");
  }
  return nullptr;
}

void bs_model_destruct(bs_model* m) {
  if (m == nullptr) return;
  delete m->model;
  delete m;
}

void bs_free_error_msg(char* error_msg) { std::free(error_msg); }

const char* bs_name(const bs_model* m) { return m->name.c_str(); }

const char* bs_model_info(const bs_model* m) { return m->info.c_str(); }

const char* bs_param_names(const bs_model* m, bool include_tp, bool include_gq) {
  return m->names[(include_tp ? 1 : 0) + 2 * (include_gq ? 1 : 0)].c_str();
}

const char* bs_param_unc_names(const bs_model* m) { return m->unc_names.c_str(); }

int bs_param_num(const bs_model* m, bool include_tp, bool include_gq) {
  return m->num[(include_tp ? 1 : 0) + 2 * (include_gq ? 1 : 0)];
}

int bs_param_unc_num(const bs_model* m) { return m->unc_num; }

int bs_param_constrain(const bs_model* m, bool include_tp, bool include_gq,
                       const double* theta_unc, double* theta, bs_rng* rng,
                       char** error_msg) {
  try {
    if (include_gq && rng == nullptr)
      throw std::invalid_argument(
          "an RNG is required when include_gq is true");
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta_unc, m->unc_num);
    Eigen::VectorXd out;
    std::vector<int> params_i;
    if (rng == nullptr) {
      stan::rng_t dummy = stan::services::util::create_rng(0, 0);
      m->model->write_array(dummy, x, out, include_tp, include_gq, outstream);
    } else {
      m->model->write_array(rng->rng, x, out, include_tp, include_gq, outstream);
    }
    const int n = bs_param_num(m, include_tp, include_gq);
    if (out.size() != n)
      throw std::runtime_error("write_array returned an unexpected size");
    std::copy(out.data(), out.data() + n, theta);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in bs_param_constrain: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_param_constrain");
  }
  return -1;
}

int bs_param_unconstrain(const bs_model* m, const double* theta,
                         double* theta_unc, char** error_msg) {
  try {
    Eigen::VectorXd c = Eigen::Map<const Eigen::VectorXd>(theta, m->num[0]);
    Eigen::VectorXd u;
    m->model->unconstrain_array(c, u, outstream);
    std::copy(u.data(), u.data() + m->unc_num, theta_unc);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in bs_param_unconstrain: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_param_unconstrain");
  }
  return -1;
}

int bs_param_unconstrain_json(const bs_model* m, const char* json,
                              double* theta_unc, char** error_msg) {
  try {
    std::istringstream in(json == nullptr ? "" : json);
    stan::json::json_data context(in);
    Eigen::VectorXd u;
    m->model->transform_inits(context, u, outstream);
    std::copy(u.data(), u.data() + m->unc_num, theta_unc);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg,
              std::string("error in bs_param_unconstrain_json: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_param_unconstrain_json");
  }
  return -1;
}

int bs_log_density(const bs_model* m, bool propto, bool jacobian,
                   const double* theta_unc, double* lp, char** error_msg) {
  try {
    ensure_autodiff_stack();
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta_unc, m->unc_num);
    *lp = value_dispatch(*m->model, propto, jacobian, x, outstream);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in bs_log_density: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_log_density");
  }
  return -1;
}

int bs_log_density_gradient(const bs_model* m, bool propto, bool jacobian,
                            const double* theta_unc, double* val, double* grad,
                            char** error_msg) {
  try {
    ensure_autodiff_stack();
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta_unc, m->unc_num);
    *val = grad_dispatch(*m->model, propto, jacobian, x, grad, outstream);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg,
              std::string("error in bs_log_density_gradient: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_log_density_gradient");
  }
  return -1;
}

int bs_log_density_hessian(const bs_model* m, bool propto, bool jacobian,
                           const double* theta_unc, double* val, double* grad,
                           double* hessian, char** error_msg) {
  try {
    ensure_autodiff_stack();
    const int d = m->unc_num;
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta_unc, d);
    log_density_functor f{*m->model, propto, jacobian, outstream};
    double fx = 0;
    Eigen::VectorXd g(d);
    Eigen::MatrixXd h(d, d);
    stan::math::internal::finite_diff_hessian_auto(f, x, fx, g, h);
    *val = fx;
    std::copy(g.data(), g.data() + d, grad);
    // Symmetric, so column-major equals row-major.
    Eigen::MatrixXd hs = 0.5 * (h + h.transpose());
    std::copy(hs.data(), hs.data() + static_cast<size_t>(d) * d, hessian);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg,
              std::string("error in bs_log_density_hessian: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_log_density_hessian");
  }
  return -1;
}

int bs_log_density_hessian_vector_product(const bs_model* m, bool propto,
                                          bool jacobian,
                                          const double* theta_unc,
                                          const double* vector, double* val,
                                          double* hvp, char** error_msg) {
  try {
    ensure_autodiff_stack();
    const int d = m->unc_num;
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta_unc, d);
    Eigen::VectorXd v = Eigen::Map<const Eigen::VectorXd>(vector, d);
    log_density_functor f{*m->model, propto, jacobian, outstream};
    double fx = 0;
    Eigen::VectorXd out(d);
    stan::math::internal::finite_diff_hessian_times_vector_auto(f, x, v, fx, out);
    *val = fx;
    std::copy(out.data(), out.data() + d, hvp);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg,
              std::string("error in bs_log_density_hessian_vector_product: ")
                  + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_log_density_hessian_vector_product");
  }
  return -1;
}

bs_rng* bs_rng_construct(unsigned int seed, char** error_msg) {
  try {
    return new bs_rng(seed);
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in bs_rng_construct: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_rng_construct");
  }
  return nullptr;
}

void bs_rng_destruct(bs_rng* rng) { delete rng; }

int bs_set_print_callback(void (*callback)(const char*, int), char** error_msg) {
  try {
    std::lock_guard<std::mutex> lock(print_mutex);
    if (callback == nullptr) {
      outstream = &std::cout;
      print_stream.reset();
      print_buf.reset();
      return 0;
    }
    auto buf = std::make_unique<callback_buf>(callback);
    auto stream = std::make_unique<std::ostream>(buf.get());
    outstream = stream.get();
    print_stream = std::move(stream);
    print_buf = std::move(buf);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in bs_set_print_callback: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in bs_set_print_callback");
  }
  return -1;
}

// ===================================================== row extension ===

/// Per-row model instances built once from the full data.
struct sdp_rows {
  std::unique_ptr<stan::io::var_context> data;
  std::vector<std::unique_ptr<stan_model>> rows;  // one instance per row
  std::unique_ptr<stan_model> empty;              // the zero-row instance
  std::vector<std::string> sliced;
  std::string sliced_csv;
  int dim = 0;
  int threads = 1;
  std::unique_ptr<tbb::task_arena> arena;
  /// Bytes of a row's own data allocations that lie just below its instance
  /// (see touch_rows).
  std::ptrdiff_t prefetch_before = 0;
  /// Per-row log-likelihoods at a few points, for the aggregate queries
  /// (see point_cache); guarded by `query_mutex` with the queries.
  struct cached_point {
    std::vector<double> theta;
    std::vector<double> values;
  };
  std::vector<cached_point> cache;
  std::vector<double> pair_new, pair_old, latest;
  std::mutex query_mutex;
};

namespace {

/// Where a row's data lives relative to its instance, measured once.
///
/// Instances are built one after another, so the heap places each row's
/// allocations (the instance and its data members) in one block of about
/// the same size, the "stride" between consecutive instances.  The data
/// members come from the allocator's free list and land just below the
/// instance (e.g. linear_regression: stride 240 bytes, instance 160 bytes,
/// data at -64 and -32).  Returns the bytes below the instance to prefetch:
/// the median stride minus the instance size, capped at 1 KiB; 0 if the
/// layout is not regular.
std::ptrdiff_t measure_prefetch_before(const std::vector<std::unique_ptr<stan_model>>& rows) {
  if (rows.size() < 3) return 0;
  std::vector<std::ptrdiff_t> strides;
  const size_t m = std::min<size_t>(rows.size() - 1, 4096);
  strides.reserve(m);
  for (size_t i = 1; i <= m; ++i)
    strides.push_back(reinterpret_cast<const char*>(rows[i].get())
                      - reinterpret_cast<const char*>(rows[i - 1].get()));
  std::nth_element(strides.begin(), strides.begin() + m / 2, strides.end());
  const std::ptrdiff_t below = strides[m / 2] - static_cast<std::ptrdiff_t>(sizeof(stan_model));
  return below > 0 && below <= 1024 ? below : 0;
}

/// Bring a block of randomly chosen rows into the cache before evaluating them.
///
/// A random batch of rows of a large data set misses the cache at every
/// row, along a chain of dependent loads: the pointer in `rows`, then the
/// instance, then its data.  Evaluated one after another, each row waits
/// for two or three memory latencies (measured on linear_regression, one
/// thread: ~270 ns per row at 2e4 rows, ~750 ns at 2e6).  Software prefetch
/// of the rows ahead did not help on the 2-core AMD EPYC VM we measured
/// (740 ns), so this reads the block first with plain, independent loads
/// (~300 ns per row at 2e6): all pointers, then one byte of every cache
/// line of every instance, which the CPU overlaps (memory-level
/// parallelism).  The lines just below an instance, where its data members
/// usually live, are only prefetched: they are not ours to read, and a
/// prefetch never faults (they mostly share the instance's page, whose
/// translation the loads have just brought in).  Every load is inside an
/// instance or a `rows` element; nothing is written and no result depends
/// on it (tests/test_rows.py compares subsets with all rows bit for bit).
constexpr long long touch_block = 64;  // rows read ahead at a time

void touch_rows(const sdp_rows& r, const long long* idx, long long begin, long long end) {
  const char* ptrs[touch_block];
  const long long m = std::min(touch_block, end - begin);
  for (long long j = 0; j < m; ++j)
    ptrs[j] = reinterpret_cast<const char*>(r.rows[idx[begin + j]].get());
  for (long long j = 0; j < m; ++j) {
    const volatile unsigned char* p = reinterpret_cast<const volatile unsigned char*>(ptrs[j]);
    for (size_t off = 0; off < sizeof(stan_model); off += 64) (void)p[off];
    (void)p[sizeof(stan_model) - 1];
    const auto a = reinterpret_cast<std::uintptr_t>(ptrs[j]);
    for (std::uintptr_t line = (a - r.prefetch_before) & ~std::uintptr_t(63); line < a; line += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(line));
  }
}

/// Arguments of a row call: without an index m must be the row count;
/// every index must be a row.  Neither the index nor the row count is
/// quoted (the count is private under add/remove).
void check_rows(const sdp_rows& r, const long long* idx, long long m) {
  const long long n = static_cast<long long>(r.rows.size());
  if (idx == nullptr && m != n)
    throw std::invalid_argument("without an index, m must equal the row count");
  if (idx != nullptr)
    for (long long k = 0; k < m; ++k)
      if (idx[k] < 0 || idx[k] >= n) throw std::out_of_range("a row index is out of range");
}

/// The zero-row part at x (value, and gradient into g0 when not null),
/// once per call.  A reject gives NaN (every row is then NaN); any other
/// exception fails the call with a message free of data values.
double zero_row_part(const sdp_rows& r, const Eigen::VectorXd& x, double* g0, const char* where) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  try {
    return g0 == nullptr ? log_density_value<false, true>(*r.empty, x, outstream)
                         : log_density_grad<false, true>(*r.empty, x, g0, outstream);
  } catch (const std::domain_error&) {
    if (g0 != nullptr) std::fill(g0, g0 + r.dim, nan);
    return nan;
  } catch (const std::exception& e) {
    throw std::runtime_error(withheld_message(where, exception_kind(e)));
  } catch (...) {
    throw std::runtime_error(withheld_message(where, "a non-standard exception"));
  }
}

/// One row's value (and gradient into gk when not null).  Whatever the row
/// throws is that row's NaN, nothing more: no message is kept and the other
/// rows are evaluated as usual (the nested autodiff scope has been unwound
/// by then).
double row_value(const stan_model& model, const Eigen::VectorXd& x, double lp0,
                 const double* g0, double* gk, int d) {
  try {
    if (gk == nullptr) return log_density_value<false, true>(model, x, nullptr) - lp0;
    const double v = log_density_grad<false, true>(model, x, gk, nullptr) - lp0;
    for (int j = 0; j < d; ++j) gk[j] -= g0[j];
    return v;
  } catch (...) {
    if (gk != nullptr) std::fill(gk, gk + d, std::numeric_limits<double>::quiet_NaN());
    return std::numeric_limits<double>::quiet_NaN();
  }
}

/// Per-row values into out[0..m) (and row-major gradients into grad when
/// not null) for the rows idx (all rows in order when null), in parallel.
void evaluate_rows(const sdp_rows& r, const Eigen::VectorXd& x, double lp0, const double* g0,
                   const long long* idx, long long m, double* out, double* grad) {
  const int d = r.dim;
  auto body = [&](const tbb::blocked_range<long long>& range) {
    ensure_autodiff_stack();
    for (long long k = range.begin(); k < range.end(); ++k) {
      // An index subset: read each block of rows before evaluating it
      // (all rows in order need nothing: the hardware prefetches).
      if (idx != nullptr && (k - range.begin()) % touch_block == 0)
        touch_rows(r, idx, k, range.end());
      out[k] = row_value(*r.rows[idx == nullptr ? k : idx[k]], x, lp0, g0,
                         grad == nullptr ? nullptr : grad + k * d, d);
    }
  };
  const long long grain = grad == nullptr ? 256 : 64;
  r.arena->execute([&] {
    tbb::parallel_for(tbb::blocked_range<long long>(0, m, grain), body,
                      tbb::simple_partitioner());
  });
}

}  // namespace

int sdp_abi_version = 1;

/// Build the row instances.
///
/// `rows_var` names the integer data variable that counts rows.
/// `row_vars` is a comma-separated list of the variables to slice, or null
/// (or empty) to slice every variable whose leading dimension is the row
/// count.  `threads` <= 0 means all hardware threads.
sdp_rows* sdp_rows_construct(const char* data, const char* rows_var,
                             const char* row_vars, unsigned int seed,
                             int threads, char** error_msg) {
  try {
    std::unique_ptr<sdp_rows> r(new sdp_rows());
    r->data = make_data_context(data);
    const std::string rv(rows_var == nullptr ? "" : rows_var);
    auto& ctx = *r->data;
    if (!ctx.contains_r(rv))
      throw std::invalid_argument("the row-count variable '" + rv
                                  + "' is not in the data");
    if (!ctx.contains_i(rv) || !ctx.dims_i(rv).empty())
      throw std::invalid_argument("the row-count variable '" + rv
                                  + "' must be a single integer");
    const long n_long = ctx.vals_i(rv)[0];
    if (n_long < 0)
      throw std::invalid_argument("the row-count variable '" + rv
                                  + "' is negative");
    const size_t n = static_cast<size_t>(n_long);

    std::vector<std::string> names_r, names_i;
    ctx.names_r(names_r);
    ctx.names_i(names_i);
    std::vector<std::string> all(names_r);
    for (const auto& s : names_i)
      if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);

    if (row_vars != nullptr && row_vars[0] != '\0') {
      std::stringstream ss(row_vars);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        if (item == rv)
          throw std::invalid_argument("the row-count variable '" + rv
                                      + "' cannot be a row variable");
        if (!ctx.contains_r(item))
          throw std::invalid_argument("row variable '" + item
                                      + "' is not in the data");
        auto dims = ctx.dims_r(item);
        if (dims.empty() || dims[0] != n)
          throw std::invalid_argument(
              "row variable '" + item + "' does not have the row count ("
              + std::to_string(n) + ") as its leading dimension");
        r->sliced.push_back(item);
      }
    } else {
      for (const auto& name : all) {
        if (name == rv) continue;
        auto dims = ctx.dims_r(name);
        if (!dims.empty() && dims[0] == n) r->sliced.push_back(name);
      }
    }
    std::sort(r->sliced.begin(), r->sliced.end());
    r->sliced_csv = join_names(r->sliced);

    row_context rc(ctx, rv, r->sliced, n);
    std::unique_ptr<stan_model> full(new stan_model(ctx, seed, outstream));
    const size_t full_dim = full->num_params_r();
    full.reset();
    rc.set_row(-1);
    try {
      r->empty.reset(new stan_model(rc, seed, outstream));
    } catch (const std::exception& e) {
      throw std::runtime_error(
          std::string("the model cannot be built with zero rows ('") + rv
          + "' = 0), which stan_dp needs for the prior part: " + e.what()
          + " (allow " + rv + " = 0, e.g. declare it int<lower=0>)");
    }
    if (r->empty->num_params_r() != full_dim)
      throw std::runtime_error(
          "the number of parameters depends on the row count: "
          + std::to_string(full_dim) + " unconstrained parameters with all "
          + std::to_string(n) + " rows but "
          + std::to_string(r->empty->num_params_r())
          + " with no rows; per-row likelihoods are not defined for such a model");
    r->rows.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      rc.set_row(static_cast<long>(i));
      // Which row failed, Stan's message (which quotes values) and the
      // parameter count of one row (which can depend on its data) are not
      // reported: each would reveal something about that row.
      try {
        r->rows.emplace_back(new stan_model(rc, seed, outstream));
      } catch (const std::exception& e) {
        throw std::runtime_error(
            std::string("could not build the model for some row alone ('") + rv
            + "' = 1; it threw " + exception_kind(e)
            + "; which row, and Stan's message, are withheld because they may "
              "reveal data): the data and transformed data blocks must accept any "
              "single row of the data");
      }
      if (r->rows.back()->num_params_r() != full_dim)
        throw std::runtime_error(
            "the number of parameters depends on the row count: "
            + std::to_string(full_dim) + " unconstrained parameters with all rows "
            "but a different number with one row; per-row likelihoods are not "
            "defined for such a model");
    }
    r->dim = static_cast<int>(full_dim);
    r->data.reset();  // every instance holds its own copy of what it needs
    r->prefetch_before = measure_prefetch_before(r->rows);
    r->threads = threads > 0 ? threads
                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    r->arena.reset(new tbb::task_arena(r->threads));
    return r.release();
  } catch (const std::exception& e) {
    set_error(error_msg, e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in sdp_rows_construct");
  }
  return nullptr;
}

void sdp_rows_destruct(sdp_rows* r) { delete r; }

long long sdp_rows_n(const sdp_rows* r) {
  return static_cast<long long>(r->rows.size());
}

int sdp_rows_dim(const sdp_rows* r) { return r->dim; }

int sdp_rows_threads(const sdp_rows* r) { return r->threads; }

const char* sdp_rows_sliced(const sdp_rows* r) { return r->sliced_csv.c_str(); }

int sdp_rows_set_threads(sdp_rows* r, int threads, char** error_msg) {
  try {
    r->threads = threads > 0 ? threads
                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    r->arena.reset(new tbb::task_arena(r->threads));
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, e.what());
  }
  return -1;
}

/// Number of constrained values of the `parameters` block.
int sdp_param_num(const sdp_rows* r) {
  std::vector<std::string> names;
  r->empty->constrained_param_names(names, false, false);
  return static_cast<int>(names.size());
}

/// Constrain with the zero-row instance: the transform then depends on the
/// shared data only, never on a row.
int sdp_param_constrain(const sdp_rows* r, const double* theta_unc,
                        double* theta, char** error_msg) {
  try {
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta_unc, r->dim);
    Eigen::VectorXd out;
    stan::rng_t dummy = stan::services::util::create_rng(0, 0);
    r->empty->write_array(dummy, x, out, false, false, outstream);
    std::copy(out.data(), out.data() + out.size(), theta);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in sdp_param_constrain: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in sdp_param_constrain");
  }
  return -1;
}

/// Unconstrain with the zero-row instance (see sdp_param_constrain).
int sdp_param_unconstrain(const sdp_rows* r, const double* theta,
                          double* theta_unc, char** error_msg) {
  try {
    Eigen::VectorXd c =
        Eigen::Map<const Eigen::VectorXd>(theta, sdp_param_num(r));
    Eigen::VectorXd u;
    r->empty->unconstrain_array(c, u, outstream);
    std::copy(u.data(), u.data() + r->dim, theta_unc);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, std::string("error in sdp_param_unconstrain: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in sdp_param_unconstrain");
  }
  return -1;
}

/// log density of the zero-row model (prior and Jacobian; propto=false).
/// `grad` may be null.
int sdp_log_prior(const sdp_rows* r, const double* theta, double* lp,
                  double* grad, char** error_msg) {
  try {
    ensure_autodiff_stack();
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, r->dim);
    if (grad == nullptr) {
      *lp = log_density_value<false, true>(*r->empty, x, outstream);
    } else {
      *lp = log_density_grad<false, true>(*r->empty, x, grad, outstream);
    }
    return 0;
  } catch (const std::domain_error& e) {
    // Stan's "reject": an impossible point, not a failure of the call.
    *lp = -std::numeric_limits<double>::infinity();
    if (grad != nullptr)
      std::fill(grad, grad + r->dim, std::numeric_limits<double>::quiet_NaN());
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, withheld_message("sdp_log_prior", exception_kind(e)));
  } catch (...) {
    set_error(error_msg, withheld_message("sdp_log_prior", "a non-standard exception"));
  }
  return -1;
}

/// Per-row log-likelihood values (and gradients when `grad` is not null).
///
/// out[k] = lp(row idx[k] only; theta) - lp(no rows; theta), propto=false,
/// Jacobian included (it cancels).  `idx` null means all rows in order and
/// then `m` must equal the row count.  `grad` is row-major (m, dim).
///
/// A row whose evaluation throws anything at all -- Stan's reject
/// (std::domain_error), an index out of range, a size mismatch, any other
/// std::exception or a non-standard one -- gets a NaN value and a NaN
/// gradient, as does a row whose log density is not finite: the samplers
/// treat it as a rejected move (clip_log_ratios maps NaN to -bound).  No
/// row's exception ever fails the call or reaches the caller, so neither
/// whether a call succeeds nor its message depends on one row (DESIGN.md,
/// "Privacy invariants").  The call fails only on bad arguments (which
/// depend on no data) or when the prior (zero-row) part throws something
/// other than a reject; that part depends on the shared data only, and its
/// message names the exception's type, never Stan's text (which can quote
/// data values).
int sdp_row_log_lik(const sdp_rows* r, const double* theta,
                    const long long* idx, long long m, double* out,
                    double* grad, char** error_msg) {
  try {
    ensure_autodiff_stack();
    check_rows(*r, idx, m);
    const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, r->dim);
    std::vector<double> g0(grad == nullptr ? 0 : r->dim);
    const double lp0 = zero_row_part(*r, x, grad == nullptr ? nullptr : g0.data(),
                                     "sdp_row_log_lik");
    evaluate_rows(*r, x, lp0, g0.data(), idx, m, out, grad);
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in sdp_row_log_lik");
  }
  return -1;
}

}  // extern "C"

// ============================================== aggregate queries ===
//
// Clipped sums computed next to the rows (stan_dp/aggregates.py): no
// per-row vector crosses into Python.  Rows are processed in blocks of a
// fixed size, each block summed in order by one thread, and the block
// results merged in block order: the results do not depend on the number
// of threads (bit for bit).  They differ from NumPy's pairwise sums of the
// same values only by rounding.

namespace {

constexpr long long value_block = 1024;  // rows per block, value queries
constexpr long long grad_block = 256;    // rows per block, gradient queries

bool same_point(const std::vector<double>& a, const double* b, int d) {
  return static_cast<int>(a.size()) == d
         && std::memcmp(a.data(), b, sizeof(double) * static_cast<size_t>(d)) == 0;
}

/// The cached per-row values at theta, or null.
const std::vector<double>* cached_values(const sdp_rows& r, const double* theta) {
  for (const auto& c : r.cache)
    if (same_point(c.theta, theta, r.dim)) return &c.values;
  return nullptr;
}

/// Keep the last ratio query's two points and the latest other evaluation
/// (as stan_dp.aggregates.PointCache does).
void trim_cache(sdp_rows& r) {
  std::vector<sdp_rows::cached_point> kept;
  for (auto& c : r.cache)
    if (c.theta == r.pair_new || c.theta == r.pair_old || c.theta == r.latest)
      kept.push_back(std::move(c));
  r.cache.swap(kept);
}

void cache_put(sdp_rows& r, const double* theta, std::vector<double>&& values) {
  std::vector<double> t(theta, theta + r.dim);
  if (cached_values(r, theta) == nullptr) r.cache.push_back({t, std::move(values)});
  if (t != r.pair_new && t != r.pair_old) r.latest = t;
  trim_cache(r);
}

/// Per-row values at theta for the query's rows (all rows when idx is null).
std::vector<double> evaluate_values(const sdp_rows& r, const double* theta,
                                    const long long* idx, long long m) {
  ensure_autodiff_stack();
  const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, r.dim);
  const double lp0 = zero_row_part(r, x, nullptr, "a clipped-sum query");
  std::vector<double> out(static_cast<size_t>(m));
  evaluate_rows(r, x, lp0, nullptr, idx, m, out.data(), nullptr);
  return out;
}

/// Scale-free l2 projection on the ball of radius bound, non-finite
/// entries zeroed first (stan_dp.mechanisms.clamp_rows_l2).  Returns
/// whether the row was changed.
bool clamp_l2(double* g, int k, double bound) {
  bool bad = false;
  double big = 0.0;
  for (int j = 0; j < k; ++j) {
    if (!std::isfinite(g[j])) {
      g[j] = 0.0;
      bad = true;
    }
    big = std::max(big, std::abs(g[j]));
  }
  if (!(big > 0.0)) return bad;
  double ss = 0.0;
  for (int j = 0; j < k; ++j) {
    const double u = g[j] / big;
    ss += u * u;
  }
  const double u_norm = std::sqrt(ss);
  if (!(u_norm > bound / big)) return bad;
  const double factor = bound / u_norm;
  for (int j = 0; j < k; ++j) g[j] = (g[j] / big) * factor;
  return true;
}

}  // namespace

extern "C" {

int sdp_query_abi = 1;

/// Clipped log-likelihood-ratio sums (stan_dp.aggregates.RatioSums).
///
/// x_j = post * clip(pre * (l_j(theta_new) - l_j(theta_old)), -bound, bound)
/// with NaN (a failed row, or -inf at both points) mapped to -bound before
/// the post factor.  `idx` (length m) selects rows, null for all rows (m =
/// row count).  `groups` (length = row count, indexed by row) gives each
/// row's group in [0, n_groups), or null for one group.  Writes the group
/// totals (n_groups), the centred sum of squares over all query rows and the
/// number of rows changed by clipping (not private).  Values at a point are
/// cached when all rows are evaluated: the last query's two points and the
/// latest gradient query's point are kept.
int sdp_clipped_ratio_sums(sdp_rows* r, const double* theta_new, const double* theta_old,
                           double bound, double pre, double post, const long long* idx,
                           long long m, const int* groups, int n_groups, double* totals,
                           double* m2_out, long long* n_clipped_out, char** error_msg) {
  try {
    std::lock_guard<std::mutex> lock(r->query_mutex);
    const long long n = static_cast<long long>(r->rows.size());
    check_rows(*r, idx, m);
    if (n_groups < 1) throw std::invalid_argument("n_groups must be positive");
    if (groups != nullptr)
      for (long long i = 0; i < n; ++i)
        if (groups[i] < 0 || groups[i] >= n_groups)
          throw std::out_of_range("a group index is out of range");

    // Values at both points: from the cache (all rows) or evaluated.
    std::vector<double> fresh_new, fresh_old;
    auto values_at = [&](const double* theta, std::vector<double>& fresh) -> const double* {
      const std::vector<double>* c = cached_values(*r, theta);
      if (c != nullptr) return c->data();  // all rows: index below
      fresh = evaluate_values(*r, theta, idx, m);
      return nullptr;
    };
    const double* c_new = values_at(theta_new, fresh_new);
    const double* c_old = values_at(theta_old, fresh_old);
    auto value = [&](const double* cached, const std::vector<double>& fresh, long long k) {
      return cached != nullptr ? cached[idx == nullptr ? k : idx[k]] : fresh[k];
    };

    const long long blocks = (m + value_block - 1) / value_block;
    std::vector<double> b_tot(static_cast<size_t>(std::max(1LL, blocks)) * n_groups, 0.0);
    std::vector<double> b_sum(std::max(1LL, blocks), 0.0), b_m2(std::max(1LL, blocks), 0.0);
    std::vector<long long> b_clip(std::max(1LL, blocks), 0);
    r->arena->execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<long long>(0, blocks, 1),
          [&](const tbb::blocked_range<long long>& range) {
            std::vector<double> xs;
            for (long long b = range.begin(); b < range.end(); ++b) {
              const long long lo = b * value_block, hi = std::min(m, lo + value_block);
              xs.resize(static_cast<size_t>(hi - lo));
              double sum = 0.0;
              long long clipped = 0;
              for (long long k = lo; k < hi; ++k) {
                double ratio = value(c_new, fresh_new, k) - value(c_old, fresh_old, k);
                if (pre != 1.0) ratio *= pre;
                double x;
                if (std::isnan(ratio)) {
                  x = -bound;
                  ++clipped;
                } else if (std::abs(ratio) > bound) {
                  x = ratio > 0 ? bound : -bound;
                  ++clipped;
                } else {
                  x = ratio;
                }
                if (post != 1.0) x *= post;
                xs[k - lo] = x;
                sum += x;
                const long long row = idx == nullptr ? k : idx[k];
                b_tot[b * n_groups + (groups == nullptr ? 0 : groups[row])] += x;
              }
              const double mean = sum / static_cast<double>(hi - lo);
              double m2 = 0.0;
              for (double x : xs) m2 += (x - mean) * (x - mean);
              b_sum[b] = sum;
              b_m2[b] = m2;
              b_clip[b] = clipped;
            }
          },
          tbb::simple_partitioner());
    });
    // Merge the blocks in order (Chan et al.'s parallel variance).
    std::fill(totals, totals + n_groups, 0.0);
    double count = 0.0, sum = 0.0, m2 = 0.0;
    long long clipped = 0;
    for (long long b = 0; b < blocks; ++b) {
      for (int g = 0; g < n_groups; ++g) totals[g] += b_tot[b * n_groups + g];
      const double c_b = static_cast<double>(std::min(m, (b + 1) * value_block) - b * value_block);
      if (count > 0) {
        const double delta = b_sum[b] / c_b - sum / count;
        m2 += b_m2[b] + delta * delta * count * c_b / (count + c_b);
      } else {
        m2 = b_m2[b];
      }
      count += c_b;
      sum += b_sum[b];
      clipped += b_clip[b];
    }
    *m2_out = m2;
    *n_clipped_out = clipped;

    if (idx == nullptr) {
      r->pair_new.assign(theta_new, theta_new + r->dim);
      r->pair_old.assign(theta_old, theta_old + r->dim);
      if (c_new == nullptr) cache_put(*r, theta_new, std::move(fresh_new));
      if (c_old == nullptr) cache_put(*r, theta_old, std::move(fresh_old));
      trim_cache(*r);
    }
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in sdp_clipped_ratio_sums");
  }
  return -1;
}

/// Sum of per-row gradients, each mapped by `frame` (row-major dim x k:
/// g -> frame' g; null for the identity, k = dim), non-finite entries
/// zeroed and projected on the l2 ball of radius `bound`.  Writes the sum
/// (k) and the number of rows changed (not private).  With all rows, the
/// per-row values at theta join the cache (DP HMC's ratio test reuses them).
int sdp_clipped_grad_sum(sdp_rows* r, const double* theta, double bound, const double* frame,
                         int k_out, const long long* idx, long long m, double* total,
                         long long* n_clipped_out, char** error_msg) {
  try {
    std::lock_guard<std::mutex> lock(r->query_mutex);
    ensure_autodiff_stack();
    const int d = r->dim;
    check_rows(*r, idx, m);
    if (frame == nullptr && k_out != d) throw std::invalid_argument("k must equal dim without a frame");
    if (k_out < 1) throw std::invalid_argument("k must be positive");
    const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, d);
    std::vector<double> g0(d);
    const double lp0 = zero_row_part(*r, x, g0.data(), "a clipped-sum query");
    std::vector<double> values(static_cast<size_t>(m));
    const long long blocks = (m + grad_block - 1) / grad_block;
    std::vector<double> b_tot(static_cast<size_t>(std::max(1LL, blocks)) * k_out, 0.0);
    std::vector<long long> b_clip(std::max(1LL, blocks), 0);
    r->arena->execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<long long>(0, blocks, 1),
          [&](const tbb::blocked_range<long long>& range) {
            ensure_autodiff_stack();
            std::vector<double> g(d), h(k_out);
            for (long long b = range.begin(); b < range.end(); ++b) {
              const long long lo = b * grad_block, hi = std::min(m, lo + grad_block);
              double* acc = b_tot.data() + b * k_out;
              long long clipped = 0;
              for (long long k = lo; k < hi; ++k) {
                if (idx != nullptr && (k - lo) % touch_block == 0) touch_rows(*r, idx, k, hi);
                const stan_model& model = *r->rows[idx == nullptr ? k : idx[k]];
                values[k] = row_value(model, x, lp0, g0.data(), g.data(), d);
                double* row = g.data();
                if (frame != nullptr) {
                  for (int c = 0; c < k_out; ++c) {
                    double s = 0.0;
                    for (int j = 0; j < d; ++j) s += frame[j * k_out + c] * g[j];
                    h[c] = s;
                  }
                  row = h.data();
                }
                if (clamp_l2(row, k_out, bound)) ++clipped;
                for (int c = 0; c < k_out; ++c) acc[c] += row[c];
              }
              b_clip[b] = clipped;
            }
          },
          tbb::simple_partitioner());
    });
    std::fill(total, total + k_out, 0.0);
    long long clipped = 0;
    for (long long b = 0; b < blocks; ++b) {
      for (int c = 0; c < k_out; ++c) total[c] += b_tot[b * k_out + c];
      clipped += b_clip[b];
    }
    *n_clipped_out = clipped;
    if (idx == nullptr) cache_put(*r, theta, std::move(values));
    return 0;
  } catch (const std::exception& e) {
    set_error(error_msg, e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in sdp_clipped_grad_sum");
  }
  return -1;
}

}  // extern "C"

// ============================== in-memory data overlay (data augmentation) ===
//
// sdp_model_construct_overlay builds a model instance from the shared data of
// a JSON document with some variables supplied as arrays held in memory.
// stan_dp.augmentation imputes new records at every sweep and needs the model
// on them for its theta-update; writing and parsing them as JSON (and building
// every parameter name, GQs included, as bs_model_construct does) dominated a
// sweep (~35 ms of ~37 ms at n = 10^4 records).  The instance is meant for
// bs_log_density, bs_log_density_gradient, bs_param_unc_num, bs_param_constrain
// (without GQs) and bs_model_destruct; its name lists are left empty.
//
// names[v], is_int[v], n_dims[v]: the variable; its dims are the next n_dims[v]
// entries of `dims`; values[v] holds prod(dims) numbers in column-major order
// (the order of every Stan var_context), as doubles even for int variables.
// Variables named here take precedence over those of base_json.

#include <stan/io/array_var_context.hpp>
#include <stan/io/chained_var_context.hpp>

extern "C" {

bs_model* sdp_model_construct_overlay(const char* base_json, int n_vars,
                                      const char** names, const int* is_int,
                                      const int* n_dims, const long long* dims,
                                      const double* const* values,
                                      unsigned int seed, char** error_msg) {
  try {
    auto base = make_data_context(base_json);
    std::vector<std::string> names_r, names_i;
    std::vector<double> values_r;
    std::vector<int> values_i;
    std::vector<std::vector<size_t>> dims_r, dims_i;
    const long long* d = dims;
    for (int v = 0; v < n_vars; ++v) {
      std::vector<size_t> shape;
      size_t size = 1;
      for (int k = 0; k < n_dims[v]; ++k) {
        if (d[k] < 0) throw std::invalid_argument("negative dimension");
        shape.push_back(static_cast<size_t>(d[k]));
        size *= static_cast<size_t>(d[k]);
      }
      d += n_dims[v];
      if (is_int[v]) {
        names_i.emplace_back(names[v]);
        dims_i.push_back(shape);
        for (size_t k = 0; k < size; ++k) {
          double x = values[v][k];
          if (!(std::fabs(x) <= 2147483647.0) || x != std::floor(x))
            throw std::domain_error(std::string("int variable '") + names[v]
                                    + "' holds a non-integer value");
          values_i.push_back(static_cast<int>(x));
        }
      } else {
        names_r.emplace_back(names[v]);
        dims_r.push_back(shape);
        values_r.insert(values_r.end(), values[v], values[v] + size);
      }
    }
    stan::io::array_var_context overlay(names_r, values_r, dims_r, names_i,
                                        values_i, dims_i);
    stan::io::chained_var_context context(overlay, *base);
    std::unique_ptr<bs_model> m(new bs_model());
    m->model = new stan_model(context, seed, outstream);
    m->name = m->model->model_name();
    m->unc_num = static_cast<int>(m->model->num_params_r());
    return m.release();
  } catch (const std::exception& e) {
    set_error(error_msg,
              std::string("error in sdp_model_construct_overlay: ") + e.what());
  } catch (...) {
    set_error(error_msg, "unknown error in sdp_model_construct_overlay");
  }
  return nullptr;
}

/// One sweep of record updates of data-augmentation MCMC (Ju, Awan, Gong, Rao
/// 2022, Algorithm 1, steps 2b-2c) for a mechanism whose log density in the
/// summed statistic s is separable:
///   kind 1:  log eta(s_dp | s) = -sum_j w[j] * |s_dp[j] - s[j]|     (Laplace)
///   kind 2:  log eta(s_dp | s) = -sum_j w[j] * (s_dp[j] - s[j])^2   (Gaussian)
/// Record i (in order) proposes s -> s + delta[i, :] (delta = t(x_i*) - t(x_i),
/// row-major n x k) and is accepted when log_u[i] < log eta(new) - log eta(old);
/// s is updated in place (O(k) per record, Proposition 3.2).  accepted[i] is
/// set to 0/1; *min_log_ratio receives min_i min(0, log ratio_i).  Returns the
/// number of accepted records, or -1 for a bad kind.
long long sdp_augment_sweep(long long n, int k, int kind, const double* s_dp,
                            const double* w, const double* delta,
                            const double* log_u, double* s,
                            unsigned char* accepted, double* min_log_ratio) {
  if (kind != 1 && kind != 2) return -1;
  long long n_acc = 0;
  double min_lr = 0.0;
  for (long long i = 0; i < n; ++i) {
    const double* d = delta + i * k;
    double lr = 0.0;
    for (int j = 0; j < k; ++j) {
      const double r = s_dp[j] - s[j];
      const double r_new = r - d[j];
      lr += kind == 1 ? w[j] * (std::fabs(r) - std::fabs(r_new))
                      : w[j] * (r * r - r_new * r_new);
    }
    if (lr < min_lr) min_lr = lr;
    const bool acc = log_u[i] < lr;
    accepted[i] = acc ? 1 : 0;
    if (acc) {
      ++n_acc;
      for (int j = 0; j < k; ++j) s[j] += d[j];
    }
  }
  *min_log_ratio = min_lr;
  return n_acc;
}

}  // extern "C"
