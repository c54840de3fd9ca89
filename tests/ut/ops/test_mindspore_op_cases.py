# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""MindSpore op cases as data (``hyper_parallel.testing.mindspore_op_cases``): the inputs and the call of a
case are the same wherever they are built (the kernel check and the ranks of MindSpore launch 2)."""
import numpy as np
import pytest

from hyper_parallel.testing.mindspore_op_cases import build_call, case_arrays, float_inputs, leaves, tuple_literals


def test_inputs_are_drawn_in_the_case_range_and_fixed_values_are_kept():
    case = {"shapes": [[2, 3], [4]], "dtypes": ["float32", "int64"], "values": {1: [3, 0, 2, 1]},
            "low": -1.0, "high": -0.5}
    first, second = case_arrays(case, 7), case_arrays(case, 7)
    assert first[0].dtype == np.float32 and first[0].shape == (2, 3)
    assert ((first[0] >= -1.0) & (first[0] < -0.5)).all()
    np.testing.assert_array_equal(first[0], second[0])  # same seed, same numbers: both sides run the same data
    assert first[1].dtype == np.int64 and first[1].tolist() == [3, 0, 2, 1]
    assert float_inputs(case) == [0]
    assert not np.array_equal(case_arrays(case, 8)[0], first[0])


def test_an_integer_tensor_without_values_is_refused_by_name():
    with pytest.raises(ValueError, match="input 0: a int64 tensor needs fixed 'values'"):
        case_arrays({"shapes": [[3]], "dtypes": ["int64"]}, 0)


def test_the_argument_template_places_tensors_lists_and_literals():
    seen = []

    def func(*args, **kwargs):
        seen.append((args, kwargs))
        return args[0], [args[1]]
    call = build_call({"shapes": [[1], [2], [3]], "args": [{"t": 2}, [{"t": 0}, {"t": 1}], [1, [2, 3]], None],
                       "kwargs": {"dims": [0, 1], "flag": True}}, func)
    out = call("a", "b", "c")
    (args, kwargs), = seen
    assert args == ("c", ["a", "b"], (1, (2, 3)), None) and kwargs == {"dims": (0, 1), "flag": True}
    assert leaves(out) == ["c", "a", "b"]
    assert build_call({"shapes": [[1], [2]], "kwargs": {}}, lambda *a: a)("x", "y") == ("x", "y")
    assert tuple_literals({"a": [[1], 2]}) == {"a": ((1,), 2)}


def test_drop_pending_error_lets_later_ops_run():
    """After an op without a CPU kernel fails, the next op works once the stored error is dropped."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore import mint  # pylint: disable=import-outside-toplevel
    from hyper_parallel.testing.mindspore_op_cases import drop_pending_error  # pylint: disable=import-outside-toplevel
    x = ms.Tensor(np.full((2,), 0.5, dtype=np.float32))
    with pytest.raises(RuntimeError, match="unregistered"):
        mint.acos(x).asnumpy()  # no AcosExt CPU kernel in MindSpore 2.10
    drop_pending_error()
    assert drop_pending_error() is None  # nothing pending any more
    assert np.allclose((x + x).asnumpy(), [1.0, 1.0])
