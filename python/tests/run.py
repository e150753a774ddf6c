#!/usr/bin/env python3
"""The package's tests as ctest runs them (tests/CMakeLists.txt: python_op_cpu, gpu_python_op):

    python3 python/tests/run.py cpu    # test_cpu_*.py: no GPU, no library needed
    python3 python/tests/run.py gpu    # test_gpu_*.py: a CUDA GPU and libladder_capi.so

Exit 77 (ctest's skip) when torch is not importable, or (gpu) when torch sees no GPU: a machine
without them reports the tests skipped, never passed. Runs pytest when it is installed, else the
same tests with unittest (they are unittest cases; LADDER_TEST_RUNNER=unittest forces it), so the GPU
machine needs nothing beyond torch."""
import importlib.util
import os
import pathlib
import sys
import unittest

SKIP = 77
HERE = pathlib.Path(__file__).resolve().parent


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("cpu", "gpu"):
        sys.exit(__doc__)
    which = sys.argv[1]
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any failure to import is a skip: no usable torch here)
        print("SKIPPED: torch is not importable (%s); the operator's tests need PyTorch" % e)
        return SKIP
    if which == "gpu" and not torch.cuda.is_available():
        print("SKIPPED: torch %s sees no CUDA GPU" % torch.__version__)
        return SKIP
    sys.path.insert(0, str(HERE.parent))
    if importlib.util.find_spec("pytest") and os.environ.get("LADDER_TEST_RUNNER") != "unittest":
        import pytest
        marker = "gpu" if which == "gpu" else "not gpu"
        return pytest.main(["-q", "-rs", str(HERE), "-m", marker] + (["-s"] if which == "gpu" else []))
    print("(pytest is not installed: running the tests with unittest)")
    suite = unittest.defaultTestLoader.discover(str(HERE), pattern="test_%s_*.py" % which, top_level_dir=str(HERE))
    result = unittest.TextTestRunner(verbosity=1).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
