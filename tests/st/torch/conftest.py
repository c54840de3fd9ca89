# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""Fixtures shared by the torch ST modules."""
import pytest


@pytest.fixture(scope="session")
def trainer_cache_dir(tmp_path_factory):
    """One data cache (the trained BPE tokenizer, the tokenized corpus) for every trainer ST module."""
    return str(tmp_path_factory.mktemp("hp_trainer_data_cache"))
