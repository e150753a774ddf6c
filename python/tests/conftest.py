"""pytest only (the tests are unittest cases, so `python -m unittest` runs them too): the GPU
files' tests carry the `gpu` marker, so `pytest -m "not gpu"` is the CPU suite."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # python/: the package, uninstalled


def pytest_collection_modifyitems(config, items):
    for item in items:
        if pathlib.Path(str(item.fspath)).name.startswith("test_gpu"):
            item.add_marker(pytest.mark.gpu)
