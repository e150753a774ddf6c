"""The attention ladder's kernels as a PyTorch operator (python/README.md).

    import ladder_attention
    out = ladder_attention.attention(q, k, v, causal=True)   # q, k, v [B, H, N, D] fp16/bf16 on CUDA

Importing needs no library: libladder_capi.so is opened on the first real call (_lib.py says
where it is looked for). The operators are torch.ops.ladder.attention_fwd and attention_bwd."""
import torch  # noqa: F401  (before the library is ever opened: _lib.py says why)

from . import dispatch
from ._lib import LadderError, LibraryNotFound, library, library_path
from .api import attention
from .ops import UnsupportedError, attention_bwd, attention_fwd, attention_varlen_bwd, attention_varlen_fwd

__all__ = ["attention", "attention_fwd", "attention_bwd", "dispatch", "library", "library_path",
           "LadderError", "LibraryNotFound", "UnsupportedError"]
