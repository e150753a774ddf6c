"""PyTorch made absent: first on PYTHONPATH (tests/cpu/test_scripts.py), this shadows an installed
torch, so that the CPU tests of the round's scripts run as on a machine without it, whatever this
machine has."""
raise ImportError("torch is made absent by tests/cpu/fake_torch/absent (the CPU tests run as without PyTorch)")
