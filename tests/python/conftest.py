"""Fixtures shared by the Python suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def clean_kernel_policy() -> Iterator[None]:
    """No PyTorch kernel policy and an empty decision log before and after the test
    (the policy and the log are process-wide). Suites of the PyTorch path use it for
    every test: ``pytestmark = pytest.mark.usefixtures("clean_kernel_policy")``."""
    import xpuruntime.pytorch as xrt_torch

    xrt_torch.clear_kernel_policy()
    xrt_torch.clear_decision_log()
    yield
    xrt_torch.clear_kernel_policy()
    xrt_torch.clear_decision_log()
