# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""``hyper_parallel._lazy.lazy_exports``: the lazy ``__getattr__``/``__dir__`` every feature package uses."""
import sys
import types

import pytest

from hyper_parallel._lazy import lazy_exports


@pytest.fixture(name="package")
def _package():
    """A throw-away package whose lazy names point at ``json`` and ``math``."""
    module = types.ModuleType("hp_lazy_probe")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_loads_on_first_use_and_stores_the_name(package):
    getattr_, dir_ = lazy_exports(package.__name__, {"dumps": "json", "pi": "math"})
    assert "dumps" not in vars(package)
    import json  # pylint: disable=import-outside-toplevel
    assert getattr_("dumps") is json.dumps
    assert vars(package)["dumps"] is json.dumps
    assert dir_() == sorted(set(vars(package)) | {"dumps", "pi"})


def test_unknown_name_names_the_package(package):
    getattr_, _ = lazy_exports(package.__name__, {"pi": "math"})
    with pytest.raises(AttributeError, match="'hp_lazy_probe' has no attribute 'tau'"):
        getattr_("tau")


def test_cache_predicate_keeps_a_name_looked_up_every_time(package):
    getattr_, _ = lazy_exports(package.__name__, {"dumps": "json", "pi": "math"},
                               cache=lambda name, module: module != "json")
    assert getattr_("dumps") is not None and "dumps" not in vars(package)
    assert getattr_("pi") > 3.14 and "pi" in vars(package)


def test_feature_packages_use_it():
    """The optim package re-reads its backend-chosen classes; its factories are stored."""
    import hyper_parallel.optim as optim  # pylint: disable=import-outside-toplevel
    assert optim.Muon is not None and "Muon" not in vars(optim)
    assert optim.get_hyper_optimizer is not None and "get_hyper_optimizer" in vars(optim)
