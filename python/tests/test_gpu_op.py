"""The operator on a GPU (skipped without CUDA or without libladder_capi.so): values and gradients
against PyTorch's SDPA in fp32 on ragged shapes, dense, GQA, varlen, decode and paged, causal and
not, fp16 and bf16, with tests/gpu/capi_in_torch.py's rule -- the error at most twice PyTorch's own
fp16/bf16 SDPA error plus one unit in the last place of the largest reference value, and no NaN;
torch.library.opcheck on the real kernels; a CUDA graph captured after one eager call;
torch.compile(fullgraph=True) of a small attention block; the errors for what no variant serves."""
import sys
import pathlib
import unittest

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ladder_attention as la  # noqa: E402
from ladder_attention import ops  # noqa: E402

sdpa = torch.nn.functional.scaled_dot_product_attention
DTYPES = (torch.float16, torch.bfloat16)


def setUpModule():
    if not torch.cuda.is_available():
        raise unittest.SkipTest("no CUDA GPU")
    try:
        la.library()
    except la.LibraryNotFound as e:
        raise unittest.SkipTest(str(e))


def ulp(dtype):
    return 2.0 ** (-10 if dtype == torch.float16 else -7)


def attend(q, k, v, causal):
    """SDPA on [B, H, Nq, D] against [B, Hkv, Nk, D], causal aligned to the end (as the ladder)."""
    nq, nk = q.shape[2], k.shape[2]
    mask = torch.ones(nq, nk, dtype=torch.bool, device=q.device).tril(nk - nq) if causal and nq != nk else None
    return sdpa(q, k, v, attn_mask=mask, is_causal=causal and nq == nk, enable_gqa=True)


def by_sequence(fn, lens, *xs):
    """fn on each sequence of packed [total, H, D] tensors ([1, H, n, D] each), packed back."""
    outs, start = [], 0
    for n in lens:
        outs.append(fn(*(x[start:start + n].transpose(0, 1)[None] for x in xs))[0].transpose(0, 1))
        start += n
    return torch.cat(outs)


def results(fn, inputs, d_o):
    """fn(*inputs)'s output and, given d_o, the gradients of its inputs, on fresh leaves."""
    leaves = [x.detach().clone().requires_grad_(d_o is not None) for x in inputs]
    with torch.set_grad_enabled(d_o is not None):
        out = fn(*leaves)
        if d_o is None:
            return [out.detach()]
        return [out.detach()] + list(torch.autograd.grad(out, leaves, d_o))


class Case(unittest.TestCase):
    def check(self, what, fn, ref_fn, inputs, grad=True):
        """fn's output (and gradients) against ref_fn in fp32, each within the tolerance rule."""
        dtype = inputs[0].dtype
        d_o = torch.randn_like(inputs[0]) if grad else None
        ref = results(ref_fn, [x.float() for x in inputs], None if d_o is None else d_o.float())
        low = results(ref_fn, inputs, d_o)
        got = results(fn, inputs, d_o)
        used = "%s%s" % (ops.LAST["forward"], " + " + str(ops.LAST["backward"]) if grad else "")
        floor = ulp(dtype) * max(float(r.abs().max()) for r in ref[1:] or ref)
        for name, g, r, lo in zip(("O", "dQ", "dK", "dV"), got, ref, low):
            this_floor = ulp(dtype) * float(r.abs().max()) if name == "O" else floor
            torch_err = float((lo.float() - r).abs().max())
            err = float((g.float() - r).abs().max()) if bool(torch.isfinite(g).all()) else float("nan")
            tol = 2 * torch_err + this_floor
            print("%s  %s %s [%s]: max|%s - fp32| = %.3g, tolerance %.3g" % (
                "ok  " if err <= tol else "FAIL", what, str(dtype)[6:], used, name, err, tol))
            self.assertLessEqual(err, tol, "%s %s %s [%s]" % (what, dtype, name, used))  # NaN fails too


class Values(Case):
    def test_dense_and_gqa(self):
        shapes = [(2, 3, 3, 1000, 64), (1, 2, 2, 77, 128), (1, 1, 1, 1, 64), (2, 8, 2, 1000, 128),
                  (1, 8, 2, 77, 64), (1, 4, 1, 1, 128)]
        for dtype in DTYPES:
            for b, h, hkv, n, d in shapes:
                for causal in (False, True):
                    q = torch.randn(b, h, n, d, dtype=dtype, device="cuda")
                    k, v = (torch.randn(b, hkv, n, d, dtype=dtype, device="cuda") for _ in range(2))
                    what = "B=%d H=%d Hkv=%d N=%d D=%d%s" % (b, h, hkv, n, d, " causal" if causal else "")
                    for grad in (False, True):  # no_grad: the fastest forward; grad: one writing the LSE
                        self.check(what, lambda q, k, v: la.attention(q, k, v, causal),
                                   lambda q, k, v: attend(q, k, v, causal), [q, k, v], grad)

    def test_varlen(self):
        lens = [1, 17, 127, 128, 129, 1000]
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
        for dtype in DTYPES:
            for d in (64, 128):
                for causal in (False, True):
                    q = torch.randn(sum(lens), 8, d, dtype=dtype, device="cuda")
                    k, v = (torch.randn(sum(lens), 2, d, dtype=dtype, device="cuda") for _ in range(2))
                    for grad in (False, True):
                        self.check("varlen %s D=%d%s" % (lens, d, " causal" if causal else ""),
                                   lambda q, k, v: la.attention(q, k, v, causal, cu_seqlens=cu, seqlens=lens),
                                   lambda q, k, v: by_sequence(lambda *x: attend(*x, causal), lens, q, k, v),
                                   [q, k, v], grad)

    def test_decode_and_paged(self):
        for dtype in DTYPES:
            for nq, causal in ((1, False), (2, True), (7, True)):
                q = torch.randn(3, 8, nq, 128, dtype=dtype, device="cuda")
                k, v = (torch.randn(3, 2, 4097, 128, dtype=dtype, device="cuda") for _ in range(2))
                what = "decode B=3 H=8 Hkv=2 Nq=%d Nkv=4097%s" % (nq, " causal" if causal else "")
                self.check(what, lambda q, k, v: la.attention(q, k, v, causal),
                           lambda q, k, v: attend(q, k, v, causal), [q, k, v], grad=False)
                page, pages = 64, (4097 + 63) // 64
                order = torch.randperm(3 * pages, device="cuda")
                table = order.view(3, pages).to(torch.int32)

                def paged(q, k, v):
                    pools = []
                    for x in (k, v):
                        padded = torch.zeros(3, 2, pages * page, 128, dtype=x.dtype, device="cuda")
                        padded[:, :, :4097] = x
                        pool = torch.empty(3 * pages, 2, page, 128, dtype=x.dtype, device="cuda")
                        pool[order] = padded.view(3, 2, pages, page, 128).transpose(1, 2).reshape(-1, 2, page, 128)
                        pools.append(pool)
                    return la.attention(q, pools[0], pools[1], causal, block_table=table, kv_seqlen=4097)
                self.check("paged(64) " + what, paged, lambda q, k, v: attend(q, k, v, causal), [q, k, v], grad=False)

    def test_strided_inputs(self):
        qkv = torch.randn(2, 77, 3, 4, 64, dtype=torch.float16, device="cuda").permute(2, 0, 3, 1, 4)
        with torch.no_grad():
            a = la.attention(qkv[0], qkv[1], qkv[2], True)
            b = la.attention(*(x.contiguous() for x in qkv), True)
        self.assertTrue(torch.equal(a, b))


class Machinery(Case):
    def test_opcheck(self):
        # deterministic backwards: opcheck compares the gradients of two runs
        for dtype, causal in ((torch.float16, True), (torch.bfloat16, False)):
            q, k, v = (torch.randn(1, 4, 77, 64, dtype=dtype, device="cuda", requires_grad=True) for _ in range(3))
            result = torch.library.opcheck(torch.ops.ladder.attention_fwd.default, (q, k, v, causal),
                                           {"backward_variant": "deterministic"})
            self.assertTrue(all(r == "SUCCESS" for r in result.values()), result)
        out, lse = torch.ops.ladder.attention_fwd(q.detach(), k.detach(), v.detach(), True)
        bwd_args = (torch.randn_like(out), q.detach(), k.detach(), v.detach(), out, lse, True, "deterministic")
        result = torch.library.opcheck(torch.ops.ladder.attention_bwd.default, bwd_args)
        self.assertTrue(all(r == "SUCCESS" for r in result.values()), result)

    def test_cuda_graph_after_one_eager_call(self):
        for dtype in DTYPES:
            q, k, v = (torch.randn(2, 8, 333, 128, dtype=dtype, device="cuda", requires_grad=True) for _ in range(3))
            d_o = torch.randn_like(q)

            def step():
                out = la.attention(q, k, v, True)
                return [out] + list(torch.autograd.grad(out, (q, k, v), d_o))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()  # the eager call: the library allocates the variants' workspaces here
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static = step()
            for x in (q, k, v, d_o):  # new values in the captured tensors: the replay must see them
                x.data.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            replayed = [t.clone() for t in static]
            self.check("graph replay B=2 H=8 N=333 D=128 causal", lambda *_: replayed[0],
                       lambda q, k, v: attend(q, k, v, True), [q.detach(), k.detach(), v.detach()], grad=False)
            ref = results(lambda q, k, v: attend(q, k, v, True), [x.detach().float() for x in (q, k, v)], d_o.float())
            low = results(lambda q, k, v: attend(q, k, v, True), [x.detach() for x in (q, k, v)], d_o)
            floor = ulp(dtype) * max(float(r.abs().max()) for r in ref[1:])
            for g, r, lo in zip(replayed[1:], ref[1:], low[1:]):
                self.assertLessEqual(float((g.float() - r).abs().max()), 2 * float((lo.float() - r).abs().max()) + floor)

    def test_compile_fullgraph(self):
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = torch.nn.Linear(512, 3 * 512, dtype=torch.bfloat16, device="cuda")

            def forward(self, x):
                b, n, _ = x.shape
                q, k, v = self.qkv(x).view(b, n, 3, 8, 64).permute(2, 0, 3, 1, 4)
                return la.attention(q, k, v, causal=True).transpose(1, 2).reshape(b, n, 512)
        torch._dynamo.reset()
        block = Block()
        x = torch.randn(2, 300, 512, dtype=torch.bfloat16, device="cuda")
        eager = block(x)
        eager.float().square().sum().backward()
        eager_grad = block.qkv.weight.grad.clone()
        block.qkv.weight.grad = None
        compiled = torch.compile(block, fullgraph=True)(x)
        compiled.float().square().sum().backward()
        torch.testing.assert_close(compiled, eager, atol=3e-2, rtol=3e-2)
        torch.testing.assert_close(block.qkv.weight.grad, eager_grad, atol=0.5, rtol=5e-2)

    def test_what_no_variant_serves(self):
        q = torch.randn(1, 2, 64, 128, dtype=torch.float16, device="cuda")
        with torch.no_grad():
            with self.assertRaises(la.UnsupportedError) as cm:
                la.attention(q, q, q, variant="34/three_iterators")  # three consumers refuse D = 128
            self.assertIn("D = 128", str(cm.exception))
            with self.assertRaises(la.UnsupportedError) as cm:
                la.attention(q, q, q, variant="77/none")
            self.assertIn("no attention variant 77/none", str(cm.exception))
        d96 = torch.randn(1, 2, 64, 96, dtype=torch.float16, device="cuda")
        self.assertRaises(ValueError, la.attention, d96, d96, d96)
        self.assertRaises(TypeError, la.attention, q.float(), q.float(), q.float())
        long_q = torch.randn(1, 8, 40, 64, dtype=torch.float16, device="cuda")  # 40 queries, 1000 keys:
        kv = torch.randn(1, 2, 1000, 64, dtype=torch.float16, device="cuda")  # no decode step takes > 16
        try:
            with torch.no_grad():
                la.attention(long_q, kv, kv, True)
            print("chunked prefill: served by %s" % ops.LAST["forward"])
        except la.UnsupportedError as e:  # an error that says why, never a crash
            self.assertIn("at most 16 query tokens", str(e))

    def test_varlen_lengths_from_cu_seqlens(self):
        lens = [5, 300, 64]
        cu = torch.tensor([0, 5, 305, 369], dtype=torch.int32, device="cuda")
        q = torch.randn(369, 4, 64, dtype=torch.bfloat16, device="cuda")
        with torch.no_grad():
            a = la.attention(q, q, q, True, cu_seqlens=cu)  # read back (a sync, eager only)
            b = la.attention(q, q, q, True, cu_seqlens=cu, seqlens=lens, max_seqlen=300)
        self.assertTrue(torch.equal(a, b))


if __name__ == "__main__":
    unittest.main()
