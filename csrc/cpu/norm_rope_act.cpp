// Copyright 2026 The hyper-parallel Authors. All rights reserved.
// SPDX-License-Identifier: Apache-2.0
//
// Row-wise CPU kernels: RMSNorm (forward, backward), rotary embedding (forward; inverse = backward)
// and SwiGLU (forward, backward). Vectorised with at::vec, parallel over rows with at::parallel_for.
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <vector>

#include "../ops.h"

namespace hyper_parallel {
namespace {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// Rows per parallel task: about 32k elements per task.
inline int64_t grain_rows(int64_t row_len) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, row_len));
}

template <typename T>
T sum_of_products(const T* a, const T* b, int64_t n) {
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

// ------------------------------------------------------------------ RMSNorm
template <typename T>
void rms_norm_rows(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t d, double eps) {
  at::parallel_for(0, rows, grain_rows(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * d;
      T* yr = y + r * d;
      const T rs = T(1) / std::sqrt(sum_of_products(xr, xr, d) / T(d) + T(eps));
      rstd[r] = rs;
      const Vec<T> vrs(rs);
      int64_t j = 0;
      for (; j + Vec<T>::size() <= d; j += Vec<T>::size()) {
        Vec<T> v = Vec<T>::loadu(xr + j) * vrs;
        if (w != nullptr) {
          v = v * Vec<T>::loadu(w + j);
        }
        v.store(yr + j);
      }
      for (; j < d; ++j) {
        yr[j] = xr[j] * rs * (w != nullptr ? w[j] : T(1));
      }
    }
  });
}

// dx = rstd * g*w - x * rstd^3 * mean(g*w*x);  dw = sum over rows of g * x * rstd.
template <typename T>
void rms_norm_backward_rows(const T* g, const T* x, const T* w, const T* rstd, T* dx, T* dw, int64_t rows,
                            int64_t d) {
  const int nthreads = at::get_num_threads();
  std::vector<T> partial(w != nullptr ? static_cast<size_t>(nthreads) * d : 0, T(0));
  at::parallel_for(0, rows, grain_rows(d), [&](int64_t begin, int64_t end) {
    std::vector<T> gw(d);
    T* acc = w != nullptr ? partial.data() + static_cast<size_t>(at::get_thread_num()) * d : nullptr;
    for (int64_t r = begin; r < end; ++r) {
      const T* gr = g + r * d;
      const T* xr = x + r * d;
      T* dxr = dx + r * d;
      const T rs = rstd[r];
      for (int64_t j = 0; j < d; ++j) {
        gw[j] = w != nullptr ? gr[j] * w[j] : gr[j];
      }
      const T coef = sum_of_products(gw.data(), xr, d) * rs * rs * rs / T(d);
      const Vec<T> vrs(rs), vcoef(coef);
      int64_t j = 0;
      for (; j + Vec<T>::size() <= d; j += Vec<T>::size()) {
        Vec<T> vx = Vec<T>::loadu(xr + j);
        (Vec<T>::loadu(gw.data() + j) * vrs - vx * vcoef).store(dxr + j);
        if (acc != nullptr) {
          at::vec::fmadd(Vec<T>::loadu(gr + j) * vrs, vx, Vec<T>::loadu(acc + j)).store(acc + j);
        }
      }
      for (; j < d; ++j) {
        dxr[j] = gw[j] * rs - xr[j] * coef;
        if (acc != nullptr) {
          acc[j] += gr[j] * rs * xr[j];
        }
      }
    }
  });
  if (w != nullptr) {
    for (int64_t j = 0; j < d; ++j) {
      T s = T(0);
      for (int t = 0; t < nthreads; ++t) {
        s += partial[static_cast<size_t>(t) * d + j];
      }
      dw[j] = s;
    }
  }
}

// ------------------------------------------------------------------ rotary
// Offsets (in elements) of row r of `t` (expanded to the rows' shape; last dim contiguous).
std::vector<int64_t> row_offsets(const at::Tensor& t) {
  const int64_t lead_dims = t.dim() - 1;
  int64_t rows = 1;
  for (int64_t i = 0; i < lead_dims; ++i) {
    rows *= t.size(i);
  }
  std::vector<int64_t> off(rows);
  std::vector<int64_t> idx(lead_dims, 0);
  int64_t cur = 0;
  for (int64_t r = 0; r < rows; ++r) {
    off[r] = cur;
    for (int64_t i = lead_dims - 1; i >= 0; --i) {  // odometer step
      if (++idx[i] < t.size(i)) {
        cur += t.stride(i);
        break;
      }
      cur -= t.stride(i) * (t.size(i) - 1);
      idx[i] = 0;
    }
  }
  return off;
}

// Forward: o1 = x1 c1 - x2 s1, o2 = x2 c2 + x1 s2.  Inverse: o1 = x1 c1 + x2 s2, o2 = x2 c2 - x1 s1.
template <typename T>
void rotary_rows(const T* x, const T* c, const T* s, const std::vector<int64_t>& coff,
                 const std::vector<int64_t>& soff, T* out, int64_t rows, int64_t d, bool inverse) {
  const int64_t half = d / 2;
  at::parallel_for(0, rows, grain_rows(d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * d;
      const T* cr = c + coff[r];
      const T* sr = s + soff[r];
      T* o = out + r * d;
      int64_t j = 0;
      for (; j + Vec<T>::size() <= half; j += Vec<T>::size()) {
        Vec<T> x1 = Vec<T>::loadu(xr + j), x2 = Vec<T>::loadu(xr + half + j);
        Vec<T> c1 = Vec<T>::loadu(cr + j), c2 = Vec<T>::loadu(cr + half + j);
        Vec<T> s1 = Vec<T>::loadu(sr + j), s2 = Vec<T>::loadu(sr + half + j);
        if (inverse) {
          (x1 * c1 + x2 * s2).store(o + j);
          (x2 * c2 - x1 * s1).store(o + half + j);
        } else {
          (x1 * c1 - x2 * s1).store(o + j);
          (x2 * c2 + x1 * s2).store(o + half + j);
        }
      }
      for (; j < half; ++j) {
        const T x1 = xr[j], x2 = xr[half + j];
        if (inverse) {
          o[j] = x1 * cr[j] + x2 * sr[half + j];
          o[half + j] = x2 * cr[half + j] - x1 * sr[j];
        } else {
          o[j] = x1 * cr[j] - x2 * sr[j];
          o[half + j] = x2 * cr[half + j] + x1 * sr[half + j];
        }
      }
    }
  });
}

// ------------------------------------------------------------------ SwiGLU
template <typename T>
void swiglu_flat(const T* g, const T* u, T* out, int64_t n) {
  at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
    const Vec<T> one(T(1));
    int64_t i = begin;
    for (; i + Vec<T>::size() <= end; i += Vec<T>::size()) {
      Vec<T> vg = Vec<T>::loadu(g + i);
      (vg / (one + vg.neg().exp()) * Vec<T>::loadu(u + i)).store(out + i);
    }
    for (; i < end; ++i) {
      out[i] = g[i] / (T(1) + std::exp(-g[i])) * u[i];
    }
  });
}

// d_up = grad * silu(gate);  d_gate = grad * up * sig * (1 + gate * (1 - sig)).
template <typename T>
void swiglu_backward_flat(const T* go, const T* g, const T* u, T* dg, T* du, int64_t n) {
  at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
    const Vec<T> one(T(1));
    int64_t i = begin;
    for (; i + Vec<T>::size() <= end; i += Vec<T>::size()) {
      Vec<T> vg = Vec<T>::loadu(g + i), vo = Vec<T>::loadu(go + i);
      Vec<T> sig = one / (one + vg.neg().exp());
      (vo * vg * sig).store(du + i);
      (vo * Vec<T>::loadu(u + i) * sig * (one + vg * (one - sig))).store(dg + i);
    }
    for (; i < end; ++i) {
      const T sig = T(1) / (T(1) + std::exp(-g[i]));
      du[i] = go[i] * g[i] * sig;
      dg[i] = go[i] * u[i] * sig * (T(1) + g[i] * (T(1) - sig));
    }
  });
}

}  // namespace

// ------------------------------------------------------------------ entry points
std::tuple<at::Tensor, at::Tensor> rms_norm_cpu(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                                double eps) {
  check_floating(x, "rms_norm x");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) > 0, "hyper_parallel::rms_norm: x needs a non-empty last dim, got ",
              x.sizes());
  const int64_t d = x.size(-1);
  if (weight.has_value()) {
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == d, "hyper_parallel::rms_norm: weight must have shape [",
                d, "], got ", weight->sizes());
  }
  const auto ct = compute_type(x.scalar_type());
  at::Tensor xc = as_compute(x, ct);
  at::Tensor wc = weight.has_value() ? as_compute(*weight, ct) : at::Tensor();
  at::Tensor y = at::empty_like(xc);
  std::vector<int64_t> stat_shape(x.sizes().begin(), x.sizes().end() - 1);
  at::Tensor rstd = at::empty(stat_shape, xc.options());
  const int64_t rows = xc.numel() / d;
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::rms_norm", [&] {
    rms_norm_rows<scalar_t>(xc.data_ptr<scalar_t>(), wc.defined() ? wc.data_ptr<scalar_t>() : nullptr,
                            y.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>(), rows, d, eps);
  });
  return {y.to(x.scalar_type()), rstd};
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                                         const std::optional<at::Tensor>& weight,
                                                         const at::Tensor& rstd) {
  TORCH_CHECK(grad.sizes() == x.sizes(), "hyper_parallel::rms_norm_backward: grad shape ", grad.sizes(),
              " != x shape ", x.sizes());
  const int64_t d = x.size(-1);
  const auto ct = compute_type(x.scalar_type());
  at::Tensor gc = as_compute(grad, ct), xc = as_compute(x, ct), rc = as_compute(rstd, ct);
  at::Tensor wc = weight.has_value() ? as_compute(*weight, ct) : at::Tensor();
  at::Tensor dx = at::empty_like(xc);
  at::Tensor dw = at::zeros({d}, xc.options());
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::rms_norm_backward", [&] {
    rms_norm_backward_rows<scalar_t>(gc.data_ptr<scalar_t>(), xc.data_ptr<scalar_t>(),
                                     wc.defined() ? wc.data_ptr<scalar_t>() : nullptr, rc.data_ptr<scalar_t>(),
                                     dx.data_ptr<scalar_t>(), dw.data_ptr<scalar_t>(), xc.numel() / d, d);
  });
  const auto wt = weight.has_value() ? weight->scalar_type() : x.scalar_type();
  return {dx.to(x.scalar_type()), dw.to(wt)};
}

at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse) {
  check_floating(x, "rotary x");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "hyper_parallel::rotary: x's last dim must be even, got ",
              x.sizes());
  TORCH_CHECK(cos.dim() <= x.dim() && sin.dim() <= x.dim(),
              "hyper_parallel::rotary: cos/sin must broadcast to x's shape ", x.sizes(), ", got ", cos.sizes(),
              " and ", sin.sizes());
  TORCH_CHECK(cos.size(-1) == x.size(-1) && sin.size(-1) == x.size(-1),
              "hyper_parallel::rotary: cos/sin last dim must equal x's (", x.size(-1), "), got ", cos.sizes(),
              " and ", sin.sizes());
  const auto ct = compute_type(x.scalar_type());
  at::Tensor xc = as_compute(x, ct);
  // expanded views (stride 0 on broadcast dims); the rows index through their strides
  at::Tensor cc = as_compute(cos, ct).expand(x.sizes());
  at::Tensor sc = as_compute(sin, ct).expand(x.sizes());
  at::Tensor out = at::empty_like(xc);
  const int64_t d = x.size(-1);
  const int64_t rows = d == 0 ? 0 : xc.numel() / d;
  const std::vector<int64_t> coff = row_offsets(cc), soff = row_offsets(sc);
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::rotary", [&] {
    rotary_rows<scalar_t>(xc.data_ptr<scalar_t>(), cc.data_ptr<scalar_t>(), sc.data_ptr<scalar_t>(), coff, soff,
                          out.data_ptr<scalar_t>(), rows, d, inverse);
  });
  return out.to(x.scalar_type());
}

at::Tensor swiglu_cpu(const at::Tensor& gate, const at::Tensor& up) {
  check_floating(gate, "swiglu gate");
  TORCH_CHECK(gate.sizes() == up.sizes(), "hyper_parallel::swiglu: gate and up must have the same shape, got ",
              gate.sizes(), " and ", up.sizes());
  const auto ct = compute_type(gate.scalar_type());
  at::Tensor gc = as_compute(gate, ct), uc = as_compute(up, ct);
  at::Tensor out = at::empty_like(gc);
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::swiglu", [&] {
    swiglu_flat<scalar_t>(gc.data_ptr<scalar_t>(), uc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), gc.numel());
  });
  return out.to(gate.scalar_type());
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward_cpu(const at::Tensor& grad, const at::Tensor& gate,
                                                       const at::Tensor& up) {
  TORCH_CHECK(grad.sizes() == gate.sizes() && gate.sizes() == up.sizes(),
              "hyper_parallel::swiglu_backward: grad, gate and up must have one shape, got ", grad.sizes(), ", ",
              gate.sizes(), ", ", up.sizes());
  const auto ct = compute_type(gate.scalar_type());
  at::Tensor oc = as_compute(grad, ct), gc = as_compute(gate, ct), uc = as_compute(up, ct);
  at::Tensor dg = at::empty_like(gc), du = at::empty_like(uc);
  AT_DISPATCH_FLOATING_TYPES(ct, "hyper_parallel::swiglu_backward", [&] {
    swiglu_backward_flat<scalar_t>(oc.data_ptr<scalar_t>(), gc.data_ptr<scalar_t>(), uc.data_ptr<scalar_t>(),
                                   dg.data_ptr<scalar_t>(), du.data_ptr<scalar_t>(), gc.numel());
  });
  return {dg.to(gate.scalar_type()), du.to(up.scalar_type())};
}

}  // namespace hyper_parallel
