"""The operator on a GPU (skipped without CUDA or without libladder_capi.so): values and gradients
against PyTorch's SDPA in fp32 on ragged shapes, dense, GQA, varlen, decode and paged, causal and
not, fp16 and bf16, with tests/gpu/capi_in_torch.py's rule -- the error at most twice PyTorch's own
fp16/bf16 SDPA error plus one unit in the last place of the largest reference value, and no NaN;
torch.library.opcheck on the real kernels; a CUDA graph captured after one eager call (dense and
varlen), and the error for a first call under capture; torch.compile(fullgraph=True) of a small
attention block and of varlen, and mode="reduce-overhead" (Inductor's CUDA graphs) of both, with
inputs changed in place between replays; the errors for what no variant serves."""
import contextlib
import sys
import pathlib
import unittest

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import ladder_attention as la  # noqa: E402
from ladder_attention import _lib, ops  # noqa: E402

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


@contextlib.contextmanager
def library_calls():
    """[(entry point, whether the current stream was capturing)] of every call into the library
    meanwhile: a CUDA-graph replay makes none, so the list tells what was captured and replayed."""
    calls, real = [], _lib.call

    def call(name, *args):
        calls.append((name, torch.cuda.is_current_stream_capturing()))
        return real(name, *args)
    _lib.call = call
    try:
        yield calls
    finally:
        _lib.call = real


def randomize(*xs):
    """New values in place (the tensors a graph captured), each of its own scale."""
    with torch.no_grad():
        for x in xs:
            x.copy_(torch.randn_like(x) * float(x.float().std().clamp(min=1e-3)))


def block_fn(attn, causal=True):
    """A small attention block, x [B, N, 512] -> [B, N, 512]: qkv projection, 8 heads of D = 64."""
    def fn(x, weight, bias):
        b, n, _ = x.shape
        q, k, v = torch.nn.functional.linear(x, weight, bias).view(b, n, 3, 8, 64).permute(2, 0, 3, 1, 4)
        return attn(q, k, v, causal).transpose(1, 2).reshape(b, n, 512)
    return fn


class Block(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.qkv = torch.nn.Linear(512, 3 * 512, dtype=dtype, device="cuda")

    def forward(self, x):
        return block_fn(lambda q, k, v, causal: la.attention(q, k, v, causal))(x, self.qkv.weight, self.qkv.bias)


class Case(unittest.TestCase):
    def check(self, what, fn, ref_fn, inputs, grad=True):
        """fn's output (and gradients) against ref_fn in fp32, each within the tolerance rule."""
        d_o = torch.randn_like(inputs[0]) if grad else None
        got = results(fn, inputs, d_o)
        used = "%s%s" % (ops.LAST["forward"], " + " + str(ops.LAST["backward"]) if grad else "")
        self.compare(what, got, ref_fn, inputs, d_o, used)

    def compare(self, what, got, ref_fn, inputs, d_o, used, names=("O", "dQ", "dK", "dV"), own_floors=False):
        """got (an output and, with d_o, its inputs' gradients) against ref_fn on inputs in fp32: the
        error at most twice ref_fn's own in the inputs' dtype plus one ulp of the largest value (of
        the output; of all gradients, or with own_floors of each: inputs of unlike scales)."""
        dtype = inputs[0].dtype
        ref = results(ref_fn, [x.float() for x in inputs], None if d_o is None else d_o.float())
        low = results(ref_fn, inputs, d_o)
        self.assertEqual(len(got), len(ref), what)
        floor = ulp(dtype) * max(float(r.abs().max()) for r in ref[1:] or ref)
        for i, (name, g, r, lo) in enumerate(zip(names, got, ref, low)):
            this_floor = ulp(dtype) * float(r.abs().max()) if i == 0 or own_floors else floor
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

    def test_hopper_forwards_write_the_lse(self):
        """On sm_90 a training step's forward is the table's first row, which writes the log-sum-exp:
        34 (D = 64), 33 (D = 128), 26 (GQA), 27 (varlen); its LSE against fp32's logsumexp."""
        if torch.cuda.get_device_capability() != (9, 0):
            self.skipTest("the Hopper forwards run on sm_90 only")
        lens = [1, 77, 300]
        cu = torch.tensor([0, 1, 78, 378], dtype=torch.int32, device="cuda")
        cases = [("34/three_iterators", (2, 3, 3, 333, 64), None), ("33/iterators", (1, 2, 2, 333, 128), None),
                 ("26/group_order", (1, 8, 2, 333, 64), None), ("27/longest_first", (1, 4, 2, 378, 128), lens)]
        for dtype in DTYPES:
            for vid, (b, h, hkv, n, d), varlen in cases:
                for causal in (False, True):
                    if varlen:
                        q = torch.randn(n, h, d, dtype=dtype, device="cuda")
                        k, v = (torch.randn(n, hkv, d, dtype=dtype, device="cuda") for _ in range(2))
                        out, lse = la.attention(q, k, v, causal, cu_seqlens=cu, seqlens=varlen, return_lse=True)
                    else:
                        q = torch.randn(b, h, n, d, dtype=dtype, device="cuda")
                        k, v = (torch.randn(b, hkv, n, d, dtype=dtype, device="cuda") for _ in range(2))
                        out, lse = la.attention(q, k, v, causal, return_lse=True)
                    self.assertEqual(ops.LAST["forward"], vid)
                    seqs = [(0, 0, n)] if not varlen else [(0, s, m) for s, m in zip([0, 1, 78], varlen)]
                    for bb in range(b):
                        for _, start, m in seqs:
                            qs, ks = ((x[start:start + m].transpose(0, 1) if varlen else x[bb])
                                      for x in (q, k))
                            ks = ks.float().repeat_interleave(h // hkv, dim=0)
                            s = qs.float() @ ks.transpose(1, 2) / d ** 0.5
                            if causal:
                                s = s.masked_fill(torch.ones(m, m, dtype=torch.bool, device="cuda").triu(1),
                                                  float("-inf"))
                            ref = torch.logsumexp(s, dim=-1)  # [H, m]
                            got = lse[:, start:start + m] if varlen else lse[bb]
                            err = float((got - ref).abs().max()) if bool(torch.isfinite(got).all()) else float("nan")
                            print("%s  LSE %s %s B=%d H=%d Hkv=%d N=%d D=%d%s: max|lse - fp32| = %.3g" % (
                                "ok  " if err <= 1e-3 else "FAIL", vid, str(dtype)[6:], b, h, hkv, m, d,
                                " causal" if causal else "", err))
                            # fp32 sums of exp of the inputs' own products: only the summation order differs
                            self.assertLessEqual(err, 1e-3, "%s %s" % (vid, dtype))  # NaN fails too

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

    def test_cuda_graph_of_two_problems_sharing_a_workspace(self):
        """Decode (a split-KV variant, whose partials and counters live in its workspace), causal and
        not at one query token: the same bytes, two problems, so one slot, re-zeroed on each call in
        the graph (in stream order: a cudaMemset with a device synchronization there would break the
        capture). Replayed twice, with eager calls of both problems in between, each result matches
        its own eager run."""
        q = torch.randn(2, 8, 1, 128, dtype=torch.float16, device="cuda")
        k, v = (torch.randn(2, 2, 4097, 128, dtype=torch.float16, device="cuda") for _ in range(2))

        def step():
            outs = [la.attention(q, k, v, causal) for causal in (True, False)]
            used.append(ops.LAST["forward"])
            return outs
        used = []
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()  # the eager calls of both problems: the slot now last served the second
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static = step()
            for trial in range(2):
                randomize(q, k, v)
                graph.replay()
                torch.cuda.synchronize()
                replayed = [t.clone() for t in static]
                eager = step()
                for i, (g, e) in enumerate(zip(replayed, eager)):
                    self.assertTrue(bool(torch.isfinite(g).all()), (trial, i))
                    # the same kernel on the same inputs (a stale counter or partial is far off, or NaN)
                    torch.testing.assert_close(g, e, atol=2e-3, rtol=0)
        print("two problems in one graph: served by %s" % sorted(set(used)))
        self.assertTrue(all(u.split("/")[0] in ("28", "41", "42", "44") for u in used), used)  # a variant with a workspace

    def test_compile_fullgraph(self):
        torch._dynamo.reset()
        block = Block(torch.bfloat16)
        x = torch.randn(2, 300, 512, dtype=torch.bfloat16, device="cuda")
        eager = block(x)
        eager.float().square().sum().backward()
        eager_grad = block.qkv.weight.grad.clone()
        block.qkv.weight.grad = None
        compiled = torch.compile(block, fullgraph=True)(x)
        compiled.float().square().sum().backward()
        torch.testing.assert_close(compiled, eager, atol=3e-2, rtol=3e-2)
        torch.testing.assert_close(block.qkv.weight.grad, eager_grad, atol=0.5, rtol=5e-2)

    def test_compile_reduce_overhead(self):
        """Inductor's CUDA graphs (mode="reduce-overhead", fullgraph): the block's forward and backward
        recorded after the warm-up and replayed with new inputs and weights (changed in place), the
        last replay's output and gradients against the block on SDPA in fp32."""
        from torch._dynamo.utils import counters
        for dtype in DTYPES:
            torch._dynamo.reset()
            counters.clear()
            block = Block(dtype)
            compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
            x = torch.randn(2, 300, 512, dtype=dtype, device="cuda", requires_grad=True)
            d_y = torch.randn_like(x)
            weights = (block.qkv.weight, block.qkv.bias)
            previous, iterations = None, 5
            with library_calls() as calls:
                for _ in range(iterations):
                    randomize(x, d_y, *weights)
                    x.grad = None
                    block.zero_grad(set_to_none=True)
                    torch.compiler.cudagraph_mark_step_begin()
                    y = compiled(x)
                    y.backward(d_y)
                    got = [t.detach().clone() for t in (y, x.grad) + tuple(w.grad for w in weights)]
                    if previous is not None:  # new inputs: a stale replay would repeat the last values
                        for name, g, before in zip(("out", "dx", "dW", "db"), got, previous):
                            self.assertFalse(torch.equal(g, before), "%s %s did not change" % (dtype, name))
                    previous = got
            torch.cuda.synchronize()
            names = [name for name, _ in calls]
            captured = [name for name, capturing in calls if capturing]
            print("reduce-overhead %s: %d library calls in %d iterations (%d under capture), %d cudagraph skips"
                  % (str(dtype)[6:], len(calls), iterations, len(captured), counters["inductor"]["cudagraph_skips"]))
            self.assertEqual(counters["inductor"]["cudagraph_skips"], 0, "Inductor skipped its CUDA graphs")
            for entry in ("ladder_attention", "ladder_attention_backward"):
                self.assertIn(entry, captured, "the %s call was never captured" % entry)
                self.assertLess(names.count(entry), iterations, "the %s call ran every iteration: no replay" % entry)
            self.compare("reduce-overhead block B=2 N=300 H=8 D=64 causal", got,
                         block_fn(lambda q, k, v, causal: attend(q, k, v, causal)),
                         [x.detach(), *(w.detach() for w in weights)], d_y, "%s + %s" % (
                             ops.LAST["forward"], ops.LAST["backward"]), names=("out", "dx", "dW", "db"), own_floors=True)

    def test_varlen_cuda_graph_after_one_eager_call(self):
        """Varlen forward and backward (lengths on the host, cu_seqlens on the device) captured after
        one eager call, replayed twice with new q, k, v, dO in the captured tensors."""
        lens = [5, 300, 64, 129]
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
        for dtype in DTYPES:
            q = torch.randn(sum(lens), 8, 64, dtype=dtype, device="cuda", requires_grad=True)
            k, v = (torch.randn(sum(lens), 2, 64, dtype=dtype, device="cuda", requires_grad=True) for _ in range(2))
            d_o = torch.randn_like(q)

            def step():
                out = la.attention(q, k, v, True, cu_seqlens=cu, seqlens=lens)
                return [out] + list(torch.autograd.grad(out, (q, k, v), d_o))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()  # the eager call: workspaces, cuDNN's plan for these lengths
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with library_calls() as calls:
                with torch.cuda.graph(graph):
                    static = step()
            self.assertEqual(sorted(calls), [("ladder_attention_backward_serving", True),
                                             ("ladder_attention_serving", True)])
            used = "%s + %s" % (ops.LAST["forward"], ops.LAST["backward"])
            previous = None
            for _ in range(2):
                randomize(q, k, v, d_o)
                graph.replay()
                torch.cuda.synchronize()
                replayed = [t.clone() for t in static]
                if previous is not None:
                    for name, g, before in zip(("O", "dQ", "dK", "dV"), replayed, previous):
                        self.assertFalse(torch.equal(g, before), "%s %s did not change on replay" % (dtype, name))
                previous = replayed
            self.compare("varlen graph replay %s H=8 Hkv=2 D=64 causal" % lens, replayed,
                         lambda q, k, v: by_sequence(lambda *x: attend(*x, True), lens, q, k, v),
                         [q.detach(), k.detach(), v.detach()], d_o, used)

    def test_first_call_under_capture_is_refused(self):
        """A problem's first call inside a capture raises a RuntimeError saying what to do (before the
        library's cudaMalloc could invalidate the capture); after one eager call it captures."""
        q = torch.randn(1, 2, 123, 64, dtype=torch.float16, device="cuda")  # a shape no other test runs
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad():
            with self.assertRaises(RuntimeError) as cm:
                with torch.cuda.graph(graph):
                    la.attention(q, q, q, True)
            self.assertIn("never ran eagerly", str(cm.exception))
            eager = la.attention(q, q, q, True)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static = la.attention(q, q, q, True)
            graph.replay()
            torch.cuda.synchronize()
        self.assertTrue(torch.equal(static, eager))

    def test_compile_fullgraph_varlen(self):
        """torch.compile(fullgraph=True) with Inductor of varlen forward and backward; new lengths of
        the same count in the host tensor run without recompiling."""
        for dtype in DTYPES:
            torch._dynamo.reset()
            f = torch.compile(lambda q, k, v, cu, lens: la.attention(q, k, v, True, cu_seqlens=cu, seqlens=lens),
                              fullgraph=True)
            for i, lens in enumerate(([5, 300, 64, 129], [250, 17, 128, 103])):
                cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
                host = torch.tensor(lens, dtype=torch.int32)
                q = torch.randn(sum(lens), 8, 128, dtype=dtype, device="cuda")
                k, v = (torch.randn(sum(lens), 2, 128, dtype=dtype, device="cuda") for _ in range(2))
                with torch.compiler.set_stance("fail_on_recompile") if i else contextlib.nullcontext():
                    self.check("compiled varlen %s H=8 Hkv=2 D=128 causal" % lens,
                               lambda q, k, v: f(q, k, v, cu, host),
                               lambda q, k, v: by_sequence(lambda *x: attend(*x, True), lens, q, k, v), [q, k, v])

    def test_compile_reduce_overhead_varlen(self):
        """mode="reduce-overhead" of varlen forward and backward, the lengths (a host tensor) changed
        between calls, their count and total kept: the varlen ops (tagged cudagraph_unsafe) must run
        between Inductor's graphs, every call, never under capture, and each call's values must be
        its own lengths' (a graph that froze the first lengths fails here)."""
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        f = torch.compile(lambda q, k, v, cu, lens: la.attention(q, k, v, True, cu_seqlens=cu, seqlens=lens),
                          mode="reduce-overhead", fullgraph=True)
        # warm-up, recording, replay, then new lengths (chosen so that kernels frozen on the first ones
        # would still read and write inside the tensors: a wrong value, never an illegal address)
        sets = ([5, 300, 64, 129], [5, 300, 64, 129], [5, 300, 64, 129], [100, 17, 252, 129], [150, 40, 179, 129])
        q = torch.randn(sum(sets[0]), 8, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
        k, v = (torch.randn(sum(sets[0]), 2, 64, dtype=torch.bfloat16, device="cuda", requires_grad=True)
                for _ in range(2))
        d_o = torch.randn_like(q)
        cu = torch.empty(len(sets[0]) + 1, dtype=torch.int32, device="cuda")
        host = torch.empty(len(sets[0]), dtype=torch.int32)
        with library_calls() as calls:
            for lens in sets:
                randomize(q, k, v, d_o)
                cu.copy_(torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32))
                host.copy_(torch.tensor(lens, dtype=torch.int32))
                torch.compiler.cudagraph_mark_step_begin()
                out = f(q, k, v, cu, host)
                got = [out.detach().clone()] + [t.clone() for t in torch.autograd.grad(out, (q, k, v), d_o)]
                self.compare("reduce-overhead varlen %s H=8 Hkv=2 D=64 causal" % lens, got,
                             lambda q, k, v: by_sequence(lambda *x: attend(*x, True), lens, q, k, v),
                             [q.detach(), k.detach(), v.detach()], d_o, "%s + %s" % (
                                 ops.LAST["forward"], ops.LAST["backward"]))
        print("reduce-overhead varlen: %d library calls in %d iterations (%d under capture), %d cudagraph skips"
              % (len(calls), len(sets), sum(c for _, c in calls), counters["inductor"]["cudagraph_skips"]))
        names = [name for name, _ in calls]
        self.assertFalse([name for name, capturing in calls if capturing], "a varlen call was captured")
        for entry in ("ladder_attention_serving", "ladder_attention_backward_serving"):
            self.assertGreaterEqual(names.count(entry), len(sets), "%s: a call every iteration" % entry)

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
