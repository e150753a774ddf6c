"""The arguments checked before anything reaches the library, with errors that say what failed
and what to do: TypeError for an element type, ValueError for a device, a shape or a layout.
The same checks run in the wrapper (ladder_attention.attention), in the op and in its fake kernel,
so torch.compile reports them while tracing and a direct call of torch.ops.ladder.* gets them too.

Layouts (PyTorch's SDPA convention, the library's; common/problem.hpp):
  dense   q [B, H, Nq, D], k and v [B, Hkv, Nkv, D]          lse [B, H, Nq]
  varlen  q [total, H, D], k and v [total, Hkv, D], cu_seqlens [B + 1] int32 on q's device,
          seqlens [B] host lengths (a CPU tensor)              lse [H, total]
  paged   q [B, H, Nq, D], k and v [pages, Hkv, page, D], block_table [B, pages_per_seq] int32 on
          q's device, kv_seqlen keys in every sequence        lse [B, H, Nq]
Every tensor the op takes is contiguous (the wrapper copies a strided q, k, v once)."""
import collections

import torch

HEAD_DIMS = (64, 128)  # what every variant of the ladder serves
DECODE_ROWS = 16  # packed rows a K/V head that step 42 serves best (more: step 44)
DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}

Problem = collections.namedtuple(
    "Problem", "layout batch heads kv_heads seqlen kv_seqlen head_dim causal dtype page_size")


def _tensor(name, x):
    if not isinstance(x, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(x).__name__))


def _device(name, x, q, allow_meta):
    ok = ("cuda", "meta") if allow_meta else ("cuda",)
    if x.device.type not in ok:
        raise ValueError("%s is on %s: the ladder's kernels run on a CUDA device (move the tensors with "
                         ".cuda())" % (name, x.device))
    if x.device != q.device:
        raise ValueError("%s is on %s but q on %s: all of the op's tensors must be on one device"
                         % (name, x.device, q.device))


def _contiguous(name, x):
    if not x.is_contiguous():
        raise ValueError("%s of shape %s is not contiguous (strides %s): the op takes contiguous tensors; "
                         "call .contiguous() on it (ladder_attention.attention does)"
                         % (name, tuple(x.shape), tuple(x.stride())))


def _index(name, x, q, dims, allow_meta):
    _tensor(name, x)
    if x.dtype != torch.int32 or x.dim() != dims:
        raise TypeError("%s must be a %d-D torch.int32 tensor, got %d-D %s" % (name, dims, x.dim(), x.dtype))
    _device(name, x, q, allow_meta)
    _contiguous(name, x)


def describe(q, k, v, causal=False, cu_seqlens=None, seqlens=None, block_table=None, kv_seqlen=0,
             allow_meta=False):
    """The Problem of these arguments, or raise TypeError/ValueError saying what is wrong.
    allow_meta: accept meta tensors (the fake kernel's); the real kernel needs CUDA ones."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _tensor(name, x)
    if q.dtype not in DTYPES:
        raise TypeError("q is %s: the ladder's kernels take torch.float16 or torch.bfloat16 (cast with "
                        ".half() or .bfloat16()); compare with SDPA in fp32 outside the op" % q.dtype)
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype:
            raise TypeError("%s is %s but q is %s: q, k and v must have one dtype" % (name, x.dtype, q.dtype))
    for name, x in (("q", q), ("k", k), ("v", v)):
        _device(name, x, q, allow_meta)
    if k.shape != v.shape:
        raise ValueError("k %s and v %s must have the same shape" % (tuple(k.shape), tuple(v.shape)))
    if cu_seqlens is not None and block_table is not None:
        raise ValueError("cu_seqlens and block_table together: a paged cache of a packed batch is not served "
                         "(no variant of the ladder has both)")
    layout = "varlen" if cu_seqlens is not None else "paged" if block_table is not None else "dense"
    rank = 3 if layout == "varlen" else 4
    wants = {"dense": "q [B, H, Nq, D], k and v [B, Hkv, Nkv, D]",
             "varlen": "q [total, H, D], k and v [total, Hkv, D] with cu_seqlens",
             "paged": "q [B, H, Nq, D], k and v [pages, Hkv, page_size, D] with block_table"}[layout]
    if q.dim() != rank or k.dim() != rank:
        raise ValueError("q %s, k %s: the %s layout is %s" % (tuple(q.shape), tuple(k.shape), layout, wants))
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError("q has head dim %d but k and v %d" % (d, k.shape[-1]))
    if d not in HEAD_DIMS:
        raise ValueError("head dim D=%d: the ladder's kernels serve D in %s (pad the heads, or use SDPA)"
                         % (d, HEAD_DIMS))
    heads, kv_heads = q.shape[-2 if layout == "varlen" else 1], k.shape[-2 if layout == "varlen" else 1]
    if kv_heads <= 0 or heads % kv_heads != 0:
        raise ValueError("%d query heads and %d K/V heads: the K/V heads must divide the query heads (GQA)"
                         % (heads, kv_heads))
    for name, x in (("q", q), ("k", k), ("v", v)):
        _contiguous(name, x)
    page = 0
    if layout == "dense":
        batch, seqlen, kv_seqlen = q.shape[0], q.shape[2], k.shape[2]
        if k.shape[0] != batch:
            raise ValueError("q has batch %d but k and v %d" % (batch, k.shape[0]))
    elif layout == "varlen":
        if k.shape[0] != q.shape[0]:
            raise ValueError("q has %d tokens but k and v %d: the varlen layout is self-attention (keys = "
                             "queries in every sequence)" % (q.shape[0], k.shape[0]))
        _index("cu_seqlens", cu_seqlens, q, 1, allow_meta)
        batch = cu_seqlens.shape[0] - 1
        if batch < 1:
            raise ValueError("cu_seqlens has %d entries: it is [B + 1] prefix sums, 0 first" % cu_seqlens.shape[0])
        if seqlens is None:
            raise ValueError("the varlen op needs seqlens, the B lengths on the host (a CPU int tensor)")
        _tensor("seqlens", seqlens)
        if seqlens.device.type not in ("cpu", "meta") or seqlens.dim() != 1 or seqlens.shape[0] != batch:
            raise ValueError("seqlens must be the %d lengths on the host: a 1-D CPU tensor, got %s on %s"
                             % (batch, tuple(seqlens.shape), seqlens.device))
        seqlen, kv_seqlen = 0, 0  # per sequence: from seqlens, in the real kernel
    else:
        batch, seqlen = q.shape[0], q.shape[2]
        _index("block_table", block_table, q, 2, allow_meta)
        if block_table.shape[0] != batch:
            raise ValueError("block_table has %d rows but q a batch of %d" % (block_table.shape[0], batch))
        page = k.shape[2]
        if kv_seqlen <= 0 or kv_seqlen > block_table.shape[1] * page:
            raise ValueError("kv_seqlen=%d: a paged cache needs the keys of each sequence, 1 to pages_per_seq x "
                             "page_size = %d" % (kv_seqlen, block_table.shape[1] * page))
    if causal and layout != "varlen" and seqlen > kv_seqlen:
        raise ValueError("causal with %d queries but %d keys: the mask is aligned to the end (the last query "
                         "sees every key), so there must be at least as many keys as queries" % (seqlen, kv_seqlen))
    return Problem(layout, batch, heads, kv_heads, seqlen, kv_seqlen, d, bool(causal), DTYPES[q.dtype], page)


def kind_of(p):
    """The dispatch table's row key (dispatch.py) of a Problem."""
    if p.layout in ("varlen", "paged"):
        return p.layout
    if p.seqlen != p.kv_seqlen:
        rows = p.seqlen * (p.heads // p.kv_heads)
        return "decode16" if rows <= DECODE_ROWS else "decode_wide"
    return "gqa" if p.kv_heads != p.heads else "dense"


def lse_shape(p, q):
    """The log-sum-exp's shape: [H, total] for varlen, else [B, H, Nq]."""
    return (p.heads, q.shape[0]) if p.layout == "varlen" else (p.batch, p.heads, p.seqlen)


def host_lengths(p, q, seqlens):
    """The varlen lengths as a list of ints, checked against q (the real kernel only: it reads a
    CPU tensor, never the device)."""
    lens = [int(n) for n in seqlens.tolist()]
    if any(n <= 0 for n in lens) or sum(lens) != q.shape[0]:
        raise ValueError("seqlens %s: %d positive lengths summing to q's %d tokens expected"
                         % (lens[:8] + (["..."] if len(lens) > 8 else []), p.batch, q.shape[0]))
    return lens
