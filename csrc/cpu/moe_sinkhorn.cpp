// Copyright 2026 The hyper-parallel Authors. All rights reserved.
// SPDX-License-Identifier: Apache-2.0
//
// MoE token permutation by expert index (counting sort, stable in token order; rows copied in
// parallel) and its inverse with the routing-probability weighted sum; the Sinkhorn normalisation
// with pre-clamp of a batch of small matrices (forward; backward recomputes the iterates per matrix).
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../ops.h"

namespace hyper_parallel {
namespace {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// y += a * x over n elements.
template <typename T>
void axpy(T a, const T* x, T* y, int64_t n) {
  const Vec<T> va(a);
  int64_t j = 0;
  for (; j + Vec<T>::size() <= n; j += Vec<T>::size()) {
    at::vec::fmadd(va, Vec<T>::loadu(x + j), Vec<T>::loadu(y + j)).store(y + j);
  }
  for (; j < n; ++j) {
    y[j] += a * x[j];
  }
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  Vec<T> acc(T(0));
  int64_t j = 0;
  for (; j + Vec<T>::size() <= n; j += Vec<T>::size()) {
    acc = at::vec::fmadd(Vec<T>::loadu(a + j), Vec<T>::loadu(b + j), acc);
  }
  T s = at::vec::vec_reduce_all<T>([](Vec<T>& p, Vec<T>& q) { return p + q; }, acc);
  for (; j < n; ++j) {
    s += a[j] * b[j];
  }
  return s;
}

void check_row_map(const at::Tensor& row_map, int64_t rows, const char* op) {
  TORCH_CHECK(row_map.dim() == 2 && row_map.scalar_type() == at::kLong, "hyper_parallel::", op,
              ": row_map must be an int64 [tokens, top_k] tensor, got ", row_map.scalar_type(), " ",
              row_map.sizes());
  if (row_map.numel() > 0) {
    const int64_t lo = row_map.min().item<int64_t>(), hi = row_map.max().item<int64_t>();
    TORCH_CHECK(lo >= 0 && hi < rows, "hyper_parallel::", op, ": row_map entries must lie in [0, ", rows,
                "), got [", lo, ", ", hi, "]");
  }
}

// One Sinkhorn step on an n x m matrix (in place): rows (axis 0) or columns (axis 1) divided by their
// sum + eps; the divisors are written to `den`.
template <typename T>
void normalise(T* a, int64_t n, int64_t m, bool rows, T eps, T* den) {
  const int64_t outer = rows ? n : m, inner = rows ? m : n;
  const int64_t so = rows ? m : 1, si = rows ? 1 : m;
  for (int64_t o = 0; o < outer; ++o) {
    T s = T(0);
    for (int64_t i = 0; i < inner; ++i) {
      s += a[o * so + i * si];
    }
    den[o] = s + eps;
    const T inv = T(1) / den[o];
    for (int64_t i = 0; i < inner; ++i) {
      a[o * so + i * si] *= inv;
    }
  }
}

// Gradient through one step y = a / den (den = sum + eps along the normalised axis):
// da = (dy - sum(dy * y)) / den, computed in place on dy.
template <typename T>
void normalise_backward(T* dy, const T* y, int64_t n, int64_t m, bool rows, const T* den) {
  const int64_t outer = rows ? n : m, inner = rows ? m : n;
  const int64_t so = rows ? m : 1, si = rows ? 1 : m;
  for (int64_t o = 0; o < outer; ++o) {
    T s = T(0);
    for (int64_t i = 0; i < inner; ++i) {
      s += dy[o * so + i * si] * y[o * so + i * si];
    }
    for (int64_t i = 0; i < inner; ++i) {
      dy[o * so + i * si] = (dy[o * so + i * si] - s) / den[o];
    }
  }
}

template <typename T>
void sinkhorn_forward_one(const T* x, T* out, int64_t n, int64_t m, int64_t iters, T lo, T hi, T eps, T* den) {
  for (int64_t i = 0; i < n * m; ++i) {
    out[i] = std::exp(std::min(std::max(x[i], lo), hi));
  }
  for (int64_t it = 0; it < iters; ++it) {
    normalise(out, n, m, true, eps, den);
    normalise(out, n, m, false, eps, den);
  }
}

// Recompute the iterates of one matrix (states[k] = the matrix after step k), then go back.
template <typename T>
void sinkhorn_backward_one(const T* g, const T* x, T* dx, int64_t n, int64_t m, int64_t iters, T lo, T hi, T eps,
                           std::vector<T>& states, std::vector<T>& dens) {
  const int64_t nm = n * m, steps = 2 * iters, dl = std::max(n, m);
  T* s0 = states.data();
  for (int64_t i = 0; i < nm; ++i) {
    s0[i] = std::exp(std::min(std::max(x[i], lo), hi));
  }
  for (int64_t k = 0; k < steps; ++k) {
    std::memcpy(s0 + (k + 1) * nm, s0 + k * nm, sizeof(T) * nm);
    normalise(s0 + (k + 1) * nm, n, m, k % 2 == 0, eps, dens.data() + k * dl);
  }
  std::memcpy(dx, g, sizeof(T) * nm);
  for (int64_t k = steps - 1; k >= 0; --k) {
    normalise_backward(dx, s0 + (k + 1) * nm, n, m, k % 2 == 0, dens.data() + k * dl);
  }
  for (int64_t i = 0; i < nm; ++i) {  // through exp(clamp(x))
    dx[i] = (x[i] < lo || x[i] > hi) ? T(0) : dx[i] * s0[i];
  }
}

void check_sinkhorn(const at::Tensor& logits, int64_t iters, double lo, double hi) {
  check_floating(logits, "sinkhorn logits");
  TORCH_CHECK(logits.dim() >= 2, "hyper_parallel::sinkhorn: logits must be [..., n, m], got ", logits.sizes());
  TORCH_CHECK(iters >= 0, "hyper_parallel::sinkhorn: num_iters must be >= 0, got ", iters);
  TORCH_CHECK(lo <= hi, "hyper_parallel::sinkhorn: clamp_min (", lo, ") must be <= clamp_max (", hi, ")");
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_permute_cpu(const at::Tensor& tokens,
                                                               const at::Tensor& expert_idx,
                                                               int64_t num_experts) {
  TORCH_CHECK(tokens.dim() == 2, "hyper_parallel::moe_permute: tokens must be [tokens, hidden], got ",
              tokens.sizes());
  TORCH_CHECK(expert_idx.dim() == 2 && expert_idx.size(0) == tokens.size(0) && !at::isFloatingType(expert_idx.scalar_type()),
              "hyper_parallel::moe_permute: expert_idx must be an integer [", tokens.size(0),
              ", top_k] tensor, got ", expert_idx.scalar_type(), " ", expert_idx.sizes());
  TORCH_CHECK(num_experts > 0, "hyper_parallel::moe_permute: num_experts must be > 0, got ", num_experts);
  const int64_t t = tokens.size(0), k = expert_idx.size(1), h = tokens.size(1);
  at::Tensor idx = expert_idx.to(at::kLong).contiguous();
  const int64_t* ip = idx.data_ptr<int64_t>();
  at::Tensor counts = at::zeros({num_experts}, idx.options());
  int64_t* cp = counts.data_ptr<int64_t>();
  for (int64_t s = 0; s < t * k; ++s) {
    TORCH_CHECK(ip[s] >= 0 && ip[s] < num_experts, "hyper_parallel::moe_permute: expert_idx entries must lie in [0, ",
                num_experts, "), got ", ip[s]);
    ++cp[ip[s]];
  }
  std::vector<int64_t> next(num_experts, 0);
  for (int64_t e = 1; e < num_experts; ++e) {
    next[e] = next[e - 1] + cp[e - 1];
  }
  at::Tensor row_map = at::empty({t, k}, idx.options());
  int64_t* rp = row_map.data_ptr<int64_t>();
  for (int64_t s = 0; s < t * k; ++s) {
    rp[s] = next[ip[s]]++;
  }
  at::Tensor src = tokens.contiguous();
  at::Tensor out = at::empty({t * k, h}, src.options());
  const int64_t row_bytes = h * static_cast<int64_t>(src.element_size());
  const char* sp = static_cast<const char*>(src.data_ptr());
  char* op = static_cast<char*>(out.data_ptr());
  at::parallel_for(0, t * k, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, row_bytes)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t s = begin; s < end; ++s) {
                       std::memcpy(op + rp[s] * row_bytes, sp + (s / k) * row_bytes, row_bytes);
                     }
                   });
  return {out, row_map, counts};
}

at::Tensor moe_unpermute_cpu(const at::Tensor& permuted, const at::Tensor& row_map,
                             const std::optional<at::Tensor>& probs) {
  check_floating(permuted, "moe_unpermute permuted");
  TORCH_CHECK(permuted.dim() == 2, "hyper_parallel::moe_unpermute: permuted must be [rows, hidden], got ",
              permuted.sizes());
  check_row_map(row_map, permuted.size(0), "moe_unpermute");
  const int64_t t = row_map.size(0), k = row_map.size(1), h = permuted.size(1);
  if (probs.has_value()) {
    TORCH_CHECK(probs->sizes() == row_map.sizes(), "hyper_parallel::moe_unpermute: probs must have row_map's shape ",
                row_map.sizes(), ", got ", probs->sizes());
  }
  const auto ct = compute_type(permuted.scalar_type());
  at::Tensor pc = as_compute(permuted, ct);
  at::Tensor wc = probs.has_value() ? as_compute(*probs, ct) : at::Tensor();
  at::Tensor rm = row_map.contiguous();
  at::Tensor out = at::zeros({t, h}, pc.options());
  const int64_t* rp = rm.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::moe_unpermute", [&] {
    const scalar_t* src = pc.data_ptr<scalar_t>();
    const scalar_t* w = wc.defined() ? wc.data_ptr<scalar_t>() : nullptr;
    scalar_t* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, t, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, h * k)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          axpy<scalar_t>(w != nullptr ? w[i * k + j] : scalar_t(1), src + rp[i * k + j] * h, dst + i * h, h);
        }
      }
    });
  });
  return out.to(permuted.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> moe_unpermute_backward_cpu(const at::Tensor& grad, const at::Tensor& permuted,
                                                              const at::Tensor& row_map,
                                                              const std::optional<at::Tensor>& probs) {
  check_row_map(row_map, permuted.size(0), "moe_unpermute_backward");
  const int64_t t = row_map.size(0), k = row_map.size(1), h = permuted.size(1);
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == t && grad.size(1) == h,
              "hyper_parallel::moe_unpermute_backward: grad must be [", t, ", ", h, "], got ", grad.sizes());
  const auto ct = compute_type(permuted.scalar_type());
  at::Tensor gc = as_compute(grad, ct), pc = as_compute(permuted, ct);
  at::Tensor wc = probs.has_value() ? as_compute(*probs, ct) : at::Tensor();
  at::Tensor rm = row_map.contiguous();
  at::Tensor dperm = at::zeros_like(pc);
  at::Tensor dprobs = at::zeros({t, k}, pc.options());
  const int64_t* rp = rm.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::moe_unpermute_backward", [&] {
    const scalar_t* g = gc.data_ptr<scalar_t>();
    const scalar_t* p = pc.data_ptr<scalar_t>();
    const scalar_t* w = wc.defined() ? wc.data_ptr<scalar_t>() : nullptr;
    scalar_t* dp = dperm.data_ptr<scalar_t>();
    scalar_t* dw = dprobs.data_ptr<scalar_t>();
    at::parallel_for(0, t, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, h * k)), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        for (int64_t j = 0; j < k; ++j) {
          const int64_t r = rp[i * k + j];
          axpy<scalar_t>(w != nullptr ? w[i * k + j] : scalar_t(1), g + i * h, dp + r * h, h);
          dw[i * k + j] = dot<scalar_t>(p + r * h, g + i * h, h);
        }
      }
    });
  });
  const auto wt = probs.has_value() ? probs->scalar_type() : permuted.scalar_type();
  return {dperm.to(permuted.scalar_type()), dprobs.to(wt)};
}

at::Tensor sinkhorn_cpu(const at::Tensor& logits, int64_t num_iters, double clamp_min, double clamp_max,
                        double eps) {
  check_sinkhorn(logits, num_iters, clamp_min, clamp_max);
  const auto ct = compute_type(logits.scalar_type());
  at::Tensor xc = as_compute(logits, ct);
  at::Tensor out = at::empty_like(xc);
  const int64_t n = logits.size(-2), m = logits.size(-1);
  const int64_t batch = n * m == 0 ? 0 : xc.numel() / (n * m);
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::sinkhorn", [&] {
    const scalar_t* x = xc.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, batch, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n * m * (num_iters + 1))),
                     [&](int64_t b, int64_t e) {
                       std::vector<scalar_t> den(std::max(n, m));
                       for (int64_t i = b; i < e; ++i) {
                         sinkhorn_forward_one<scalar_t>(x + i * n * m, o + i * n * m, n, m, num_iters,
                                                        scalar_t(clamp_min), scalar_t(clamp_max), scalar_t(eps),
                                                        den.data());
                       }
                     });
  });
  return out.to(logits.scalar_type());
}

at::Tensor sinkhorn_backward_cpu(const at::Tensor& grad, const at::Tensor& logits, int64_t num_iters,
                                 double clamp_min, double clamp_max, double eps) {
  check_sinkhorn(logits, num_iters, clamp_min, clamp_max);
  TORCH_CHECK(grad.sizes() == logits.sizes(), "hyper_parallel::sinkhorn_backward: grad shape ", grad.sizes(),
              " != logits shape ", logits.sizes());
  const auto ct = compute_type(logits.scalar_type());
  at::Tensor xc = as_compute(logits, ct), gc = as_compute(grad, ct);
  at::Tensor dx = at::empty_like(xc);
  const int64_t n = logits.size(-2), m = logits.size(-1);
  const int64_t batch = n * m == 0 ? 0 : xc.numel() / (n * m);
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::sinkhorn_backward", [&] {
    const scalar_t* x = xc.data_ptr<scalar_t>();
    const scalar_t* g = gc.data_ptr<scalar_t>();
    scalar_t* d = dx.data_ptr<scalar_t>();
    at::parallel_for(0, batch, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, n * m * (num_iters + 1))),
                     [&](int64_t b, int64_t e) {
                       std::vector<scalar_t> states((2 * num_iters + 1) * n * m);
                       std::vector<scalar_t> dens(std::max<int64_t>(1, 2 * num_iters) * std::max(n, m));
                       for (int64_t i = b; i < e; ++i) {
                         sinkhorn_backward_one<scalar_t>(g + i * n * m, x + i * n * m, d + i * n * m, n, m,
                                                         num_iters, scalar_t(clamp_min), scalar_t(clamp_max),
                                                         scalar_t(eps), states, dens);
                       }
                     });
  });
  return dx.to(logits.scalar_type());
}

}  // namespace hyper_parallel
