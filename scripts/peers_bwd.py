"""scripts/peers.py --pass bwd on Part VI's backward problems (the manual is peers.py's docstring):
--grid bwd-gqa (B=2 Hq=32 Hkv=8 N=4096 D=128, both masks) and --grid bwd-varlen (24 sequences of
lengths drawn from 1..8192 with --seed, H=32 Hkv=8 D=128, causal; --seed 3 is the issue's batch).

Candidates: PyTorch's SDPA backends with enable_gqa (dense GQA only: SDPA takes no packed batch, so a
varlen row says so instead of a time), FlashAttention-4 (flash_attn_func with K/V of fewer heads;
flash_attn_varlen_func with cu_seqlens), and the ladder's backward variants through
ladder_attention_backward_serving. The reference is PyTorch's cuDNN SDPA backward (else its default
SDPA's), of the whole batch for GQA and of each sequence alone for varlen; every candidate's dQ, dK,
dV is checked against it as the dense backward's are (peers_checks.gradients_check)."""
from peers_ladder import ladder_backward_serving_call, row_name
from peers_serve import serve_flops, serve_shape, varlen_lengths
from peers_torch import BACKENDS, sdpa_kernel, torch

BWD_SERVING_GRIDS = ("bwd-gqa", "bwd-varlen")
BWD_VARLEN_COUNT, BWD_VARLEN_MAX = 24, 8192  # the batch: 24 lengths from 1..8192


def bwd_serving_shapes(grid, quick=False, seed=0):
    """The shapes of --grid bwd-gqa or bwd-varlen, as peers_serve.serve_shape dicts (quick: the
    first)."""
    if grid == "bwd-gqa":
        shapes = [serve_shape("gqa", 2, 32, 8, 4096, 4096, 128, c) for c in (False, True)]
    elif grid == "bwd-varlen":
        lens = varlen_lengths(seed, BWD_VARLEN_COUNT, BWD_VARLEN_MAX)
        shapes = [serve_shape("varlen", len(lens), 32, 8, max(lens), max(lens), 128, True, lens)]
    else:
        raise ValueError(f"no backward serving grid {grid}")
    return shapes[:1] if quick else shapes


def reference_lse(q, k, causal, rows=1024):
    """The forward's log-sum-exp [B, H, N] fp32 of q [B, H, N, D] against k [B, Hkv, N, D] (Q head h
    reads K/V head h // (H / Hkv)), from fp32 products, `rows` queries at a time: the queries of one
    K/V head are stacked ([B, H, r, D] is [B, Hkv, G·r, D]), so K is never repeated."""
    bsz, heads, n, d = q.shape
    hkv = k.shape[1]
    group = heads // hkv
    lse = torch.empty(bsz, heads, n, dtype=torch.float32, device=q.device)
    kt = k.float().transpose(-1, -2)
    for i in range(0, n, rows):
        r = min(i + rows, n) - i
        s = torch.matmul(q[:, :, i:i + r].float().reshape(bsz, hkv, group * r, d), kt).reshape(bsz, heads, r, n) * d ** -0.5
        if causal:  # query i + r sees keys j <= i + r
            at = torch.arange(i, i + r, device=q.device)[:, None]
            s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > at, float("-inf"))
        lse[:, :, i:i + r] = torch.logsumexp(s, dim=-1)
    return lse


def autograd_grads(forward, inputs, d_o):
    """(O, (dQ, dK, dV)) of forward(*inputs), untimed."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    out = forward(*leaves)
    return out, torch.autograd.grad(out, leaves, d_o)


class ServingBackwardShape:
    """One problem of bwd-gqa or bwd-varlen: its inputs in the ladder's layouts (dense GQA q, d_o [B, H,
    N, D], k, v [B, Hkv, N, D]; varlen packed [total, H(kv), D]), the reference's O and gradients,
    the log-sum-exp the ladder's backward takes ([B, H, N]; varlen [H, total]), and its FLOPs."""
    backward = True

    def __init__(self, s, dtype, autograd_backward):
        self.s, self.autograd_backward = s, autograd_backward
        self.bsz, self.heads, self.hkv, self.n, self.d = s["batch"], s["heads"], s["kv_heads"], s["seqlen"], s["head_dim"]
        self.causal, self.varlen = s["causal"], bool(s["q_lens"])
        self.flops = 2.5 * serve_flops(s)  # Σ over sequences, a causal one halved
        self.stream = torch.cuda.Stream()
        if self.varlen:
            total = sum(s["q_lens"])
            self.cu = [0]
            for n in s["q_lens"]:
                self.cu.append(self.cu[-1] + n)
            self.cu_t = torch.tensor(self.cu, dtype=torch.int32, device="cuda")
            self.q, self.d_o = (torch.randn(total, self.heads, self.d, dtype=dtype, device="cuda") for _ in range(2))
            self.k, self.v = (torch.randn(total, self.hkv, self.d, dtype=dtype, device="cuda") for _ in range(2))
        else:
            self.q, self.d_o = (torch.randn(self.bsz, self.heads, self.n, self.d, dtype=dtype, device="cuda")
                                for _ in range(2))
            self.k, self.v = (torch.randn(self.bsz, self.hkv, self.n, self.d, dtype=dtype, device="cuda") for _ in range(2))
        for name in ("sdpa-cudnn", "sdpa-default"):
            try:
                self.o_fwd, self.ref = (self.per_sequence if self.varlen else self.whole)(name)
                self.ref_name = name + ("-per-sequence" if self.varlen else "")
                break
            except Exception:
                if name == "sdpa-default":
                    raise
        torch.cuda.synchronize()

    def sdpa(self, q, k, v, name):
        """SDPA with enable_gqa under backend `name` ("sdpa-default": PyTorch's own choice)."""
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if name == "sdpa-default":
            return sdpa(q, k, v, is_causal=self.causal, enable_gqa=True)
        with sdpa_kernel([BACKENDS[name]]):
            return sdpa(q, k, v, is_causal=self.causal, enable_gqa=True)

    def whole(self, name):
        """The dense batch's O and gradients under `name`, and its LSE."""
        o, grads = autograd_grads(lambda *x: self.sdpa(*x, name), (self.q, self.k, self.v), self.d_o)
        self.lse = reference_lse(self.q, self.k, self.causal)
        return o.detach().contiguous(), tuple(g.clone() for g in grads)

    def per_sequence(self, name):
        """Each sequence alone under `name`, written into the packed O, gradients and LSE [H, total]."""
        o = torch.empty(*self.q.shape, dtype=self.q.dtype, device="cuda")
        grads = tuple(torch.empty(*x.shape, dtype=x.dtype, device="cuda") for x in (self.q, self.k, self.v))
        self.lse = torch.empty(self.heads, self.q.shape[0], dtype=torch.float32, device="cuda")
        for lo, hi in zip(self.cu[:-1], self.cu[1:]):
            one = [x[lo:hi].transpose(0, 1)[None].contiguous() for x in (self.q, self.k, self.v, self.d_o)]  # [1, H, n, D]
            out, g = autograd_grads(lambda *x: self.sdpa(*x, name), one[:3], one[3])
            o[lo:hi] = out[0].transpose(0, 1)
            for dst, src in zip(grads, g):
                dst[lo:hi] = src[0].transpose(0, 1)
            self.lse[:, lo:hi] = reference_lse(*one[:2], self.causal)[0]
        return o, grads

    def text(self, dtype):
        what = (f"varlen({self.bsz} seqs, {sum(self.s['q_lens'])} tokens, longest {self.n})" if self.varlen
                else f"B={self.bsz} N={self.n}")
        return f"{what} H={self.heads} Hkv={self.hkv} D={self.d} causal={self.causal} {dtype} backward: "

    def row_fields(self):
        """What a row of this shape records besides the dense backward's keys."""
        out = {"shape_kind": self.s["kind"], "kv_heads": self.hkv}
        if self.varlen:
            out["q_lens"] = self.s["q_lens"]
        return out

    def candidates(self, backends, fa4, fa4_varlen, libs, variants, bf16):
        """(name, make) per candidate, make() -> (callable, function returning its dQ, dK, dV in the
        reference's layouts)."""
        out = []
        for name in [b for b in backends if b in BACKENDS]:
            def make(name=name):
                if self.varlen:
                    raise RuntimeError("not timed: SDPA takes no packed variable-length batch (cu_seqlens)")
                call, box = self.autograd_backward(lambda *x: self.sdpa(*x, name), (self.q, self.k, self.v),
                                                   self.d_o, self.stream)
                return call, lambda: box["grads"]
            out.append((name, make))
        if fa4 is not None:
            out.append(("fa4", lambda: self.fa4_backward(fa4, fa4_varlen)))
        for label, vid in variants:
            def make_ladder(label=label, vid=vid):
                call, grads = ladder_backward_serving_call(libs, label, vid, self.s, self.q, self.k, self.v, self.o_fwd,
                                                           self.d_o, self.lse, bf16,
                                                           self.cu_t if self.varlen else None)
                return call, lambda: grads
            out.append((row_name(label, vid), make_ladder))
        return out

    def fa4_backward(self, fa4, fa4_varlen):
        """FlashAttention-4's backward: flash_attn_varlen_func on the packed batch, or flash_attn_func
        on [B, N, H, D] copies (K/V with Hkv heads)."""
        first = lambda res: res[0] if isinstance(res, (tuple, list)) else res  # noqa: E731
        if self.varlen:
            if fa4_varlen is None:
                raise RuntimeError("flash_attn.cute has no flash_attn_varlen_func")

            def forward(q_, k_, v_):
                return first(fa4_varlen(q_, k_, v_, cu_seqlens_q=self.cu_t, cu_seqlens_k=self.cu_t,
                                        max_seqlen_q=self.n, max_seqlen_k=self.n, causal=self.causal))
            call, box = self.autograd_backward(forward, (self.q, self.k, self.v), self.d_o, self.stream)
            return call, lambda: box["grads"]
        qt, kt, vt, d_ot = (x.transpose(1, 2).contiguous() for x in (self.q, self.k, self.v, self.d_o))
        call, box = self.autograd_backward(lambda *x: first(fa4(*x, causal=self.causal)), (qt, kt, vt), d_ot, self.stream)
        return call, lambda: tuple(g.transpose(1, 2) for g in box["grads"])
