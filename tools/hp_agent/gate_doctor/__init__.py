# Copyright 2026 The hyper-parallel Authors. All rights reserved.
# SPDX-License-Identifier: Apache-2.0
"""gate-doctor: diagnose the CI gate of a PR and watch it to green as a persisted, resumable state machine.

Protocol (GitCode / MindSpore style): post ``/check-pr``; the bot checks the description and adds
``pr-check-pass``; only then does ``/retest`` start the real pipeline (without the label it yields a short
fake-green "bypass" build).  Success = labels ``pr-check-pass`` and ``ci-pipeline-passed`` after a real
successful build.  Labels can lag behind the build; a new push can drop ``pr-check-pass``.
"""
