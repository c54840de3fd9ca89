# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Random ops on DTensors: placement-invariant values from the distributed stream.

Every rule here has an expand that generates the local shard's values with
``hyper_parallel.platform.torch.random`` (counter-based over global indices, see
``hyper_parallel.core.random``), so the global result for a given seed does not depend on the mesh,
the placements or the world size. The framework's own generator is never used for DTensors, and a
``generator=`` argument other than ``None`` is refused (seed with ``hyper_parallel.manual_seed``).

Rules:
  ``RandomLikeRule``     ``torch.rand_like`` / ``randn_like`` / ``randint_like`` (option ``distribution``): the output
                         follows the input's placements, ``Partial`` -> ``Replicate`` (values do not
                         depend on the input's values).
  ``RandomInplaceRule``  ``Tensor.uniform_`` / ``normal_`` / ``bernoulli_`` / ``exponential_`` /
                         ``log_normal_`` / ``geometric_`` / ``cauchy_`` and ``nn.init.uniform_`` /
                         ``normal_``: placements unchanged. On a ``Partial(sum)``
                         tensor the rank at coordinate 0 holds the values and the others zeros; other
                         Partial kinds hold the values everywhere. Options ``distribution``, ``params``
                         (argument names after self) and ``defaults``. A tensor ``p`` of ``bernoulli_`` has
                         self's shape (or one element) and is laid out like self (Partial dims replicated).
  ``BernoulliRule``      ``torch.bernoulli`` / ``Tensor.bernoulli``: with a float ``p`` like ``rand_like``;
                         with tensor probabilities the output follows the input, Partial reduced first.
  ``NormalRule``         ``torch.normal(mean, std)`` with tensor mean and/or std: laid out like an
                         element-wise op of its tensors (broadcasting, Partial reduced first); the expand draws
                         standard normals for the output shard and returns ``mean + std * z``.
  ``RReluRule``          ``F.rrelu`` / ``torch.rrelu`` (option ``inplace``): negative inputs times a slope drawn
                         from ``U(lower, upper)`` per element when training, ``(lower + upper) / 2`` otherwise;
                         not linear, so Partial inputs are reduced first.
  ``MultinomialRule``    ``torch.multinomial`` / ``Tensor.multinomial``: rows (dim 0 of a 2-D input) may stay
                         sharded, categories are replicated; with replacement one uniform per output element
                         (inverse CDF), without replacement the exponential race (``-log(1 - u) / p``, the
                         smallest ``num_samples`` keys) with one uniform per input element.
  ``DropoutRule``        ``F.dropout`` / ``torch.dropout`` / ``torch.dropout_`` (option ``signature``:
                         ``functional`` = ``(input, p, training, inplace)``, ``aten`` = ``(input, p, train)``,
                         ``aten_inplace``): linear in the input for a fixed mask, so every placement
                         (Partial included) is kept; the mask is the same on every rank holding an element
                         and backward reuses it (the local op is ``input * noise``). Option ``feature``
                         (1, 2, 3: ``dropout1d/2d/3d``, ``feature_dropout``): one draw per (batch, channel),
                         broadcast over the other dims (torch's unbatched-input rules). Option ``alpha``
                         (``alpha_dropout``, ``feature_alpha_dropout``): torch's affine SELU-preserving
                         variant; not linear, so a Partial input is reduced first when it draws.
"""
from __future__ import annotations

from typing import Tuple

from hyper_parallel.core.placement import Partial, Placement, Replicate, Shard
from hyper_parallel.core.ops.rules.elementwise import ElementwiseRule
from hyper_parallel.core.ops.rule import Decision, OpCall, OpRule

_SELU_ALPHA = 1.7580993408473766  # torch's alpha-dropout constant
DISTRIBUTIONS = ("uniform", "normal", "bernoulli", "exponential", "randint", "log_normal", "geometric", "cauchy")
_SIGNATURES = {"functional": ("training", "inplace"), "aten": ("train", None), "aten_inplace": ("train", None)}


#: distribution -> (predicate over the numeric parameters, the expectation it states)
_PARAM_CHECKS = {
    "uniform": (lambda low, high: low <= high, "expected from <= to"),
    "normal": (lambda mean, std: std >= 0.0, "expected std >= 0"),
    "log_normal": (lambda mean, std: std > 0.0, "expected std > 0"),
    "exponential": (lambda lambd: lambd > 0.0, "expected lambd > 0"),
    "geometric": (lambda p: 0.0 < p <= 1.0, "expected p in (0, 1]"),
    "cauchy": (lambda median, sigma: sigma > 0.0, "expected sigma > 0"),
    "bernoulli": (lambda p: 0.0 <= p <= 1.0, "expected p in [0, 1]"),
}


def no_partial(placements: Tuple[Placement, ...]) -> Tuple[Placement, ...]:
    """``placements`` with every Partial replaced by Replicate."""
    return tuple(Replicate() if isinstance(p, Partial) else p for p in placements)


def _check_generator(call: OpCall) -> None:
    if call.kwargs.get("generator") is not None:
        raise call.fail("generator= is not supported on DTensors: random values come from the distributed "
                        "stream; seed it with hyper_parallel.manual_seed(seed)")
    if call.kwargs.get("out") is not None:
        raise call.fail("out= is not supported for random ops on DTensors; use the returned tensor")


def _randint_bounds(args, kwargs) -> Tuple[int, int]:
    """(low, high) of ``randint_like(input, high)`` or ``randint_like(input, low, high)``."""
    rest = list(args[1:])
    if len(rest) >= 2:
        return rest[0], rest[1]
    if len(rest) == 1:
        return kwargs.get("low", 0), rest[0]
    return kwargs.get("low", 0), kwargs.get("high")


def _self_dtensor(call: OpCall):
    """The op's self / input tensor, which must be a DTensor."""
    t = call.tensors[0] if call.tensors else None
    if t is None or not t.is_dtensor:
        raise call.fail("the input tensor must be a DTensor (a plain tensor argument cannot set the layout)")
    return t


def _tensor_param_layout(call: OpCall, t, arg, name: str):
    """Placements a tensor parameter (``bernoulli_``'s ``p``) needs: self's layout, or Replicate for one element."""
    if tuple(arg.shape) == tuple(t.shape):
        return no_partial(t.placements)
    if any(s != 1 for s in arg.shape):
        raise call.fail(f"tensor {name} of shape {list(arg.shape)} must have self's shape {list(t.shape)} or a "
                        "single element")
    return (Replicate(),) * call.mesh_ndim


def _spec(plan):
    from hyper_parallel.core.spec import DTensorSpec
    placements, shape = plan.decision.outputs
    return DTensorSpec(plan.mesh, placements, shape)


class _RandomRule(OpRule):  # pylint: disable=abstract-method  # an abstract base: subclasses implement infer
    """Shared option handling of the random rules."""

    @classmethod
    def allowed_options(cls):
        return ("distribution",)

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.distribution = options.get("distribution", "uniform")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"{op}: option distribution={self.distribution!r}; expected one of {DISTRIBUTIONS}")


class RandomLikeRule(_RandomRule):
    """``torch.rand_like`` / ``randn_like`` / ``randint_like``: fresh values shaped and laid out like the input."""

    def infer(self, call: OpCall) -> Decision:
        _check_generator(call)
        t = _self_dtensor(call)
        if self.distribution == "randint":
            self.infer_bounds(call)
        return Decision(inputs=[None] * len(call.tensors), outputs=(no_partial(t.placements), t.shape),
                        expand="generate")

    def infer_bounds(self, call: OpCall) -> None:
        """``randint_like(input, high)`` / ``(input, low, high)``: integer bounds with ``low < high``."""
        low, high = _randint_bounds(call.args, call.kwargs)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)) or not low < high:
            raise call.fail(f"randint bounds low={low!r}, high={high!r}: expected ints with low < high")


class RandomInplaceRule(_RandomRule):
    """``Tensor.uniform_`` / ``normal_`` / ``bernoulli_`` (and ``nn.init`` twins): fill self in place."""

    @classmethod
    def allowed_options(cls):
        return ("distribution", "params", "defaults")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.params = tuple(options.get("params", ()))
        self.defaults = tuple(options.get("defaults", ()))
        if len(self.params) != len(self.defaults):
            raise ValueError(f"{op}: options params {self.params} and defaults {self.defaults} differ in length")

    def _param(self, call: OpCall, k: int):
        return call.arg(1 + k, self.params[k], self.defaults[k])

    def infer(self, call: OpCall) -> Decision:
        _check_generator(call)
        t = _self_dtensor(call)
        inputs = [None] * len(call.tensors)
        for k, name in enumerate(self.params):
            value = self._param(call, k)
            if isinstance(value, tuple) and value and value[0] == "__tensor__":
                inputs[value[1]] = _tensor_param_layout(call, t, call.tensors[value[1]], name)
            elif not isinstance(value, (int, float)) or isinstance(value, bool):
                raise call.fail(f"{name}={value!r}: expected a number")
        self._check_numbers(call)
        return Decision(inputs=inputs, outputs=(t.placements, t.shape), expand="fill")

    def _check_numbers(self, call: OpCall) -> None:
        """The distribution's parameter constraint (when every parameter is a number)."""
        numbers = [self._param(call, k) for k in range(len(self.params))]
        check = _PARAM_CHECKS.get(self.distribution)
        if check is not None and all(isinstance(v, (int, float)) for v in numbers) and not check[0](*numbers):
            raise call.fail(f"{dict(zip(self.params, numbers))}: {check[1]}")


class BernoulliRule(_RandomRule):
    """``torch.bernoulli`` / ``Tensor.bernoulli``: draws with probability ``p`` or the input's values."""

    def infer(self, call: OpCall) -> Decision:
        _check_generator(call)
        t = _self_dtensor(call)
        p = call.arg(1, "p", None)
        if p is None:
            out = no_partial(t.placements)  # probabilities are values: a Partial input is reduced first
            return Decision(inputs=[out] + [None] * (len(call.tensors) - 1), outputs=(out, t.shape), expand="draw")
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
            raise call.fail(f"p={p!r}: expected a probability in [0, 1]")
        return Decision(inputs=[None] * len(call.tensors), outputs=(no_partial(t.placements), t.shape),
                        expand="draw")


class DropoutRule(OpRule):
    """Dropout with the distributed stream's mask (see module docstring)."""

    @classmethod
    def allowed_options(cls):
        return ("signature", "feature", "alpha")

    def __init__(self, op: str, **options) -> None:
        super().__init__(op, **options)
        self.signature = options.get("signature", "functional")
        if self.signature not in _SIGNATURES:
            raise ValueError(f"{op}: option signature={self.signature!r}; expected one of {sorted(_SIGNATURES)}")
        self.feature = int(options.get("feature", 0))
        if self.feature not in (0, 1, 2, 3):
            raise ValueError(f"{op}: option feature={self.feature!r}; expected 0 (element-wise) or 1, 2, 3")
        self.alpha = bool(options.get("alpha", False))

    def mask_dims(self, ndim: int) -> int:
        """Leading dims the mask covers: all (element-wise), else channels (and batch) as torch does:
        dropout1d/3d on unbatched input mask ``(C,)``; otherwise ``(N, C)``."""
        if self.feature == 0:
            return ndim
        if (self.feature, ndim) in ((1, 2), (3, 4)):
            return 1
        return 2

    def _flags(self, get) -> Tuple[float, bool, bool]:
        """(p, training, inplace) from ``get(index, name, default)``."""
        train_name, inplace_name = _SIGNATURES[self.signature]
        p = get(1, "p", 0.5)
        training = get(2, train_name, not self.alpha)  # F.alpha_dropout / feature_alpha_dropout: training=False
        inplace = get(3, inplace_name, False) if inplace_name else self.signature == "aten_inplace"
        return p, bool(training), bool(inplace)

    def infer(self, call: OpCall) -> Decision:
        t = _self_dtensor(call)
        p, training, inplace = self._flags(call.arg)
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
            raise call.fail(f"dropout probability has to be between 0 and 1, but got {p!r}")
        if self.feature == 1 and t.ndim not in (2, 3):
            raise call.fail(f"dropout1d: expected a 2-D or 3-D input, got {t.ndim}-D")
        if self.feature and t.ndim < 2:
            raise call.fail(f"feature dropout needs at least 2 dims (channels), got {t.ndim}-D")
        if self.alpha and training and 0.0 < p:  # affine, not linear: a Partial input is reduced first
            out = no_partial(t.placements)
            if inplace and out != t.placements:
                raise call.fail("in-place alpha dropout of a Partial tensor is not linear; redistribute it to "
                                "Replicate first")
            return Decision(inputs=[out] + [None] * (len(call.tensors) - 1), outputs=(out, t.shape), expand="dropout")
        return Decision(inputs=[None] * len(call.tensors), outputs=(t.placements, t.shape), expand="dropout")


class NormalRule(ElementwiseRule):
    """``torch.normal(mean, std)`` with tensor arguments (see module docstring)."""

    def infer(self, call: OpCall) -> Decision:
        _check_generator(call)
        decision = super().infer(call)
        decision.expand = "sample"
        return decision


class RReluRule(OpRule):
    """Randomized leaky ReLU (see module docstring); arguments ``(input, lower, upper, training[, inplace])``."""

    @classmethod
    def allowed_options(cls):
        return ("inplace",)

    @staticmethod
    def _args(get) -> Tuple[float, float, bool]:
        return get(1, "lower", 1.0 / 8), get(2, "upper", 1.0 / 3), bool(get(3, "training", False))

    def infer(self, call: OpCall) -> Decision:
        t = _self_dtensor(call)
        _check_generator(call)
        lower, upper, _training = self._args(call.arg)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lower, upper)) \
                or not 0.0 <= lower <= upper:
            raise call.fail(f"lower={lower!r}, upper={upper!r}: expected numbers with 0 <= lower <= upper")
        out = no_partial(t.placements)
        if out != t.placements and (self.options.get("inplace", False) or call.kwargs.get("inplace", False)):
            raise call.fail("in-place rrelu of a Partial tensor is not linear; redistribute it to Replicate first")
        return Decision(inputs=[out] + [None] * (len(call.tensors) - 1), outputs=(out, t.shape), expand="rrelu")


class MultinomialRule(OpRule):
    """``multinomial(input, num_samples, replacement=False)`` (see module docstring)."""

    def infer(self, call: OpCall) -> Decision:
        t = _self_dtensor(call)
        _check_generator(call)
        if t.ndim not in (1, 2):
            raise call.fail(f"expected a 1-D or 2-D probability tensor, got {t.ndim}-D")
        n = call.arg(1, "num_samples")
        replacement = bool(call.arg(2, "replacement", False))
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise call.fail(f"num_samples={n!r}: expected a positive int")
        if not replacement and n > t.shape[-1]:
            raise call.fail(f"cannot sample {n} > {t.shape[-1]} categories without replacement")
        keep = tuple(p if t.ndim == 2 and isinstance(p, Shard) and p.dim == 0 else Replicate() for p in t.placements)
        return Decision(inputs=[keep] + [None] * (len(call.tensors) - 1), outputs=(keep, tuple(t.shape[:-1]) + (n,)),
                        expand="sample")
