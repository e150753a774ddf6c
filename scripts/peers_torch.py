"""PyTorch for scripts/peers.py and its modules, where it is installed: torch, sdpa_kernel and the
SDPA backends by name; without it torch is None and the parts that need no GPU (argument checks,
the CPU tests on a stand-in torch) still work."""
try:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    BACKENDS = {
        "sdpa-flash": SDPBackend.FLASH_ATTENTION,
        "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
except ImportError:  # what needs no GPU (argument checks, the CPU tests) still works
    torch = None
    sdpa_kernel = None
    BACKENDS = {}

__all__ = ["BACKENDS", "sdpa_kernel", "torch"]
