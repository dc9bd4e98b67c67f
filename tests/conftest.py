"""Shared test set-up. Tests marked ``data`` read the real benchmark files: without them they
are skipped locally (with the reason) but fail under CI (``CI`` set), where the data must exist."""

import os

import pytest

from memfrontier.eval.datasets import data_root


def pytest_configure(config):
    config.addinivalue_line("markers", "data: reads the benchmark files under the data root")


def pytest_runtest_setup(item):
    if item.get_closest_marker("data") is None:
        return
    root = data_root()
    if (root / "locomo" / "locomo10.json").is_file():
        return
    msg = f"benchmark data not found under {root}; set MEMFRONTIER_DATA (see README, Data)"
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)
