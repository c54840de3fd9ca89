// Copyright 2026 The hyper-parallel Authors. All rights reserved.
// SPDX-License-Identifier: Apache-2.0
//
// The torch.library schemas of torch.ops.hyper_parallel.* and their CPU kernels. The fake (meta)
// kernels and the autograd formulas are registered from Python
// (hyper_parallel/kernels/_torch/library.py), next to the Python references.
#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY(hyper_parallel, m) {
  m.def("rms_norm(Tensor x, Tensor? weight, float eps) -> (Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor grad, Tensor x, Tensor? weight, Tensor rstd) -> (Tensor, Tensor)");
  m.def("rotary(Tensor x, Tensor cos, Tensor sin, bool inverse=False) -> Tensor");
  m.def("swiglu(Tensor gate, Tensor up) -> Tensor");
  m.def("swiglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)");
  m.def("moe_permute(Tensor tokens, Tensor expert_idx, int num_experts) -> (Tensor, Tensor, Tensor)");
  m.def("moe_unpermute(Tensor permuted, Tensor row_map, Tensor? probs) -> Tensor");
  m.def("moe_unpermute_backward(Tensor grad, Tensor permuted, Tensor row_map, Tensor? probs) -> (Tensor, Tensor)");
  m.def("sinkhorn(Tensor logits, int num_iters, float clamp_min, float clamp_max, float eps) -> Tensor");
  m.def("sinkhorn_backward(Tensor grad, Tensor logits, int num_iters, float clamp_min, float clamp_max, "
        "float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(hyper_parallel, CPU, m) {
  m.impl("rms_norm", &hyper_parallel::rms_norm_cpu);
  m.impl("rms_norm_backward", &hyper_parallel::rms_norm_backward_cpu);
  m.impl("rotary", &hyper_parallel::rotary_cpu);
  m.impl("swiglu", &hyper_parallel::swiglu_cpu);
  m.impl("swiglu_backward", &hyper_parallel::swiglu_backward_cpu);
  m.impl("moe_permute", &hyper_parallel::moe_permute_cpu);
  m.impl("moe_unpermute", &hyper_parallel::moe_unpermute_cpu);
  m.impl("moe_unpermute_backward", &hyper_parallel::moe_unpermute_backward_cpu);
  m.impl("sinkhorn", &hyper_parallel::sinkhorn_cpu);
  m.impl("sinkhorn_backward", &hyper_parallel::sinkhorn_backward_cpu);
}
