// Copyright 2026 The hyper-parallel Authors. All rights reserved.
// SPDX-License-Identifier: Apache-2.0
//
// Declarations of the CPU kernels registered as torch.ops.hyper_parallel.* (see register.cpp) and the
// small helpers they share. Kernels compute in float (double for double inputs); bfloat16 / half
// inputs are widened to float on entry and the outputs narrowed back.
#pragma once

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <optional>
#include <tuple>

namespace hyper_parallel {

// The dtype a kernel computes in for inputs of dtype `t`.
inline at::ScalarType compute_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

// `t` contiguous and in `dtype` (no copy when it already is).
inline at::Tensor as_compute(const at::Tensor& t, at::ScalarType dtype) {
  return t.to(dtype).contiguous();
}

inline void check_floating(const at::Tensor& t, const char* name) {
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), "hyper_parallel: ", name,
              " must be a floating tensor, got ", t.scalar_type());
}

// RMSNorm over the last dim: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
std::tuple<at::Tensor, at::Tensor> rms_norm_cpu(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                                                double eps);
std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                                         const std::optional<at::Tensor>& weight,
                                                         const at::Tensor& rstd);

// Rotary embedding, rotate-half convention: x * cos + rotate_half(x) * sin; `inverse` applies the
// transposed rotation (the gradient with respect to x).
at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse);

// SwiGLU: silu(gate) * up.
at::Tensor swiglu_cpu(const at::Tensor& gate, const at::Tensor& up);
std::tuple<at::Tensor, at::Tensor> swiglu_backward_cpu(const at::Tensor& grad, const at::Tensor& gate,
                                                       const at::Tensor& up);

// MoE token permutation: rows of `tokens` grouped by expert (stable in token order).
std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_permute_cpu(const at::Tensor& tokens,
                                                               const at::Tensor& expert_idx,
                                                               int64_t num_experts);
at::Tensor moe_unpermute_cpu(const at::Tensor& permuted, const at::Tensor& row_map,
                             const std::optional<at::Tensor>& probs);
std::tuple<at::Tensor, at::Tensor> moe_unpermute_backward_cpu(const at::Tensor& grad, const at::Tensor& permuted,
                                                              const at::Tensor& row_map,
                                                              const std::optional<at::Tensor>& probs);

// Sinkhorn normalisation with pre-clamp of a batch of matrices [..., n, m].
at::Tensor sinkhorn_cpu(const at::Tensor& logits, int64_t num_iters, double clamp_min, double clamp_max,
                        double eps);
at::Tensor sinkhorn_backward_cpu(const at::Tensor& grad, const at::Tensor& logits, int64_t num_iters,
                                 double clamp_min, double clamp_max, double eps);

}  // namespace hyper_parallel
