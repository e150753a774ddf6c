"""The package without a GPU (and without libladder_capi.so where it says so): the import, the
fake kernels' shapes on meta tensors, the argument checks and their messages, torch.library.opcheck
and torch.compile(fullgraph=True) through the fake kernels, and the dispatch table's rules."""
import contextlib
import os
import pathlib
import subprocess
import sys
import unittest

import torch

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PYTHON_DIR))
import ladder_attention as la  # noqa: E402
from ladder_attention import checks, dispatch, ops  # noqa: E402

F16, BF16 = torch.float16, torch.bfloat16


def meta(*shape, dtype=F16, grad=False):
    return torch.empty(*shape, dtype=dtype, device="meta", requires_grad=grad)


def varlen_args(lens, heads=8, kv_heads=2, d=64):
    total = sum(lens)
    cu = torch.empty(len(lens) + 1, dtype=torch.int32, device="meta")
    return meta(total, heads, d), meta(total, kv_heads, d), meta(total, kv_heads, d), cu


class ImportWithoutLibrary(unittest.TestCase):
    def test_import_and_fake_need_no_library(self):
        code = ("import torch, ladder_attention as la\n"
                "q = torch.empty(1, 2, 5, 64, dtype=torch.float16, device='meta')\n"
                "print(tuple(la.attention(q, q, q).shape))\n"
                "try:\n    la.library()\nexcept la.LibraryNotFound as e:\n    print('NOTFOUND', e)\n")
        env = dict(os.environ, LADDER_CAPI_LIB="/nonexistent/libladder_capi.so", PYTHONPATH=str(PYTHON_DIR))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(1, 2, 5, 64)", r.stdout)
        self.assertIn("NOTFOUND", r.stdout)
        for hint in ("python3 -m pip install --no-build-isolation -e python", "LADDER_CAPI_LIB", "/nonexistent/"):
            self.assertIn(hint, r.stdout)


class FakeShapes(unittest.TestCase):
    def check(self, out, lse, shape, lse_shape, dtype):
        self.assertEqual((tuple(out.shape), out.dtype), (shape, dtype))
        self.assertEqual((tuple(lse.shape), lse.dtype), (lse_shape, torch.float32))
        self.assertTrue(out.is_contiguous())

    def test_dense_gqa_decode_paged(self):
        for dtype in (F16, BF16):
            q, k = meta(2, 8, 77, 128, dtype=dtype), meta(2, 2, 77, 128, dtype=dtype)
            self.check(*la.attention(q, k, k, True, return_lse=True), (2, 8, 77, 128), (2, 8, 77), dtype)
            q, k = meta(3, 8, 7, 64, dtype=dtype), meta(3, 2, 4097, 64, dtype=dtype)
            self.check(*la.attention(q, k, k, True, return_lse=True), (3, 8, 7, 64), (3, 8, 7), dtype)
            pool, table = meta(40, 2, 64, 64, dtype=dtype), torch.empty(3, 10, dtype=torch.int32, device="meta")
            out, lse = la.attention(q, pool, pool, True, block_table=table, kv_seqlen=600, return_lse=True)
            self.check(out, lse, (3, 8, 7, 64), (3, 8, 7), dtype)

    def test_varlen(self):
        q, k, v, cu = varlen_args([1, 17, 1000])
        for lens in ([1, 17, 1000], torch.tensor([1, 17, 1000])):
            out, lse = la.attention(q, k, v, True, cu_seqlens=cu, seqlens=lens, max_seqlen=1000, return_lse=True)
            self.check(out, lse, (1018, 8, 64), (8, 1018), F16)

    def test_backward_shapes(self):
        q, k = meta(2, 8, 77, 64, grad=True), meta(2, 2, 77, 64, grad=True)
        v = meta(2, 2, 77, 64, grad=True)
        la.attention(q, k, v, True).sum().backward()
        for x in (q, k, v):
            self.assertEqual(x.grad.shape, x.shape)
        dq, dk, dv = torch.ops.ladder.attention_bwd(meta(2, 8, 77, 64), q.detach(), k.detach(), v.detach(),
                                                    meta(2, 8, 77, 64), meta(2, 8, 77, dtype=torch.float32), True)
        self.assertEqual((dq.shape, dk.shape, dv.shape), (q.shape, k.shape, v.shape))

    def test_strided_inputs_are_copied(self):
        qkv = meta(2, 77, 3, 8, 64).permute(2, 0, 3, 1, 4)  # [3, B, H, N, D] views, not contiguous
        self.assertFalse(qkv[0].is_contiguous())
        self.assertEqual(la.attention(qkv[0], qkv[1], qkv[2]).shape, (2, 8, 77, 64))


class Errors(unittest.TestCase):
    def raises(self, exc, words, fn, *args, **kw):
        with self.assertRaises(exc) as cm:
            fn(*args, **kw)
        for w in words:
            self.assertIn(w, str(cm.exception))

    def test_device_dtype_head_dim(self):
        cpu = torch.zeros(1, 2, 8, 64, dtype=F16)
        self.raises(ValueError, ["on cpu", "CUDA"], la.attention, cpu, cpu, cpu)
        self.raises(ValueError, ["on cpu"], torch.ops.ladder.attention_fwd, cpu, cpu, cpu)  # the op itself
        f32 = meta(1, 2, 8, 64, dtype=torch.float32)
        self.raises(TypeError, ["torch.float32", "float16", "bfloat16"], la.attention, f32, f32, f32)
        self.raises(TypeError, ["one dtype"], la.attention, meta(1, 2, 8, 64), meta(1, 2, 8, 64, dtype=BF16),
                    meta(1, 2, 8, 64, dtype=BF16))
        d96 = meta(1, 2, 8, 96)
        self.raises(ValueError, ["D=96", "64, 128"], la.attention, d96, d96, d96)
        self.raises(TypeError, ["torch.Tensor"], la.attention, [1.0], meta(1, 2, 8, 64), meta(1, 2, 8, 64))

    def test_shapes(self):
        q = meta(2, 8, 16, 64)
        self.raises(ValueError, ["batch 2", "1"], la.attention, q, meta(1, 8, 16, 64), meta(1, 8, 16, 64))
        self.raises(ValueError, ["same shape"], la.attention, q, meta(2, 8, 16, 64), meta(2, 8, 17, 64))
        self.raises(ValueError, ["divide"], la.attention, q, meta(2, 3, 16, 64), meta(2, 3, 16, 64))
        self.raises(ValueError, ["layout"], la.attention, meta(8, 16, 64), meta(8, 16, 64), meta(8, 16, 64))
        self.raises(ValueError, ["head dim 64", "128"], la.attention, q, meta(2, 8, 16, 128), meta(2, 8, 16, 128))
        self.raises(ValueError, ["causal", "at least as many keys"], la.attention, q, meta(2, 8, 4, 64),
                    meta(2, 8, 4, 64), True)

    def test_layout_the_op_cannot_take(self):
        q = meta(2, 16, 8, 64).transpose(1, 2)
        self.raises(ValueError, ["not contiguous", ".contiguous()"], torch.ops.ladder.attention_fwd, q, q, q)

    def test_varlen_and_paged_arguments(self):
        q, k, v, cu = varlen_args([3, 5])
        self.raises(ValueError, ["seqlens"], la.attention, q, k, v, cu_seqlens=cu)  # meta: no values to read
        self.raises(ValueError, ["2 positive lengths"], checks.host_lengths,
                    checks.describe(q, k, v, False, cu, torch.tensor([3, 4]), allow_meta=True), q, torch.tensor([3, 4]))
        self.raises(ValueError, ["max_seqlen=4"], la.attention, q, k, v, cu_seqlens=cu, seqlens=[3, 5], max_seqlen=4)
        self.raises(TypeError, ["int32"], la.attention, q, k, v, cu_seqlens=cu.to(torch.int64), seqlens=[3, 5])
        self.raises(ValueError, ["cu_seqlens too"], la.attention, meta(1, 2, 8, 64), meta(1, 2, 8, 64),
                    meta(1, 2, 8, 64), seqlens=[8])
        q4, pool = meta(2, 8, 1, 64), meta(10, 2, 16, 64)
        table = torch.empty(2, 5, dtype=torch.int32, device="meta")
        self.raises(ValueError, ["kv_seqlen"], la.attention, q4, pool, pool, block_table=table)
        self.raises(ValueError, ["kv_seqlen=81", "80"], la.attention, q4, pool, pool, block_table=table, kv_seqlen=81)

    def test_no_backward_for_decode_and_paged(self):
        q, k = meta(1, 8, 1, 64, grad=True), meta(1, 2, 300, 64)
        self.raises(NotImplementedError, ["no backward", "torch.no_grad()"], la.attention, q, k, k)
        with torch.no_grad():
            self.assertEqual(la.attention(q, k, k).shape, q.shape)

    def test_named_variant_without_lse_under_grad(self):
        q = meta(1, 2, 8, 64, grad=True)
        self.raises(ValueError, ["writes no log-sum-exp", "torch.no_grad()"], la.attention, q, q, q,
                    variant="21/snake")


class OpCheck(unittest.TestCase):
    def test_opcheck_on_meta(self):
        """Schema, autograd registration, fake tensor and AOT dispatch checks through the fake kernel
        (meta tensors: the CUDA kernel itself is checked by the GPU tests' opcheck)."""
        cases = [(meta(2, 8, 77, 64, grad=True), meta(2, 2, 77, 64, grad=True), meta(2, 2, 77, 64, grad=True), True),
                 (meta(1, 4, 33, 128, dtype=BF16), meta(1, 4, 33, 128, dtype=BF16), meta(1, 4, 33, 128, dtype=BF16))]
        for args in cases:
            result = torch.library.opcheck(torch.ops.ladder.attention_fwd.default, args)
            self.assertTrue(all(v == "SUCCESS" for v in result.values()), result)
        q, k, v, cu = varlen_args([1, 17, 100])
        result = torch.library.opcheck(torch.ops.ladder.attention_fwd.default, (q, k, v, True),
                                       {"cu_seqlens": cu, "seqlens": torch.tensor([1, 17, 100], dtype=torch.int32)})
        self.assertTrue(all(v == "SUCCESS" for v in result.values()), result)


class Compile(unittest.TestCase):
    def test_fullgraph_forward_and_backward(self):
        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = torch.nn.Linear(512, 3 * 512, dtype=F16, device="meta")

            def forward(self, x):
                b, n, _ = x.shape
                q, k, v = self.qkv(x).view(b, n, 3, 8, 64).permute(2, 0, 3, 1, 4)
                return la.attention(q, k, v, causal=True).transpose(1, 2).reshape(b, n, 512)

        for backend in ("eager", "aot_eager"):
            torch._dynamo.reset()
            m = Block()
            y = torch.compile(m, fullgraph=True, backend=backend)(meta(2, 77, 512))
            self.assertEqual(y.shape, (2, 77, 512))
            y.sum().backward()
            self.assertEqual(m.qkv.weight.grad.shape, m.qkv.weight.shape)

    def test_fullgraph_varlen_with_host_lengths(self):
        q, k, v, cu = varlen_args([5, 60])
        torch._dynamo.reset()
        f = torch.compile(lambda q, k, v, cu, lens: la.attention(q, k, v, True, cu_seqlens=cu, seqlens=lens),
                          fullgraph=True, backend="aot_eager")
        self.assertEqual(f(q, k, v, cu, torch.tensor([5, 60], dtype=torch.int32)).shape, q.shape)

    @unittest.skipUnless(hasattr(torch.Tag, "cudagraph_unsafe"), "this PyTorch has no cudagraph_unsafe tag")
    def test_varlen_runs_the_ops_inductor_keeps_out_of_its_graphs(self):
        """A varlen call (host lengths, read when it runs) reaches the ops tagged cudagraph_unsafe, forward
        and backward; a dense call the untagged ones, which Inductor may record in its CUDA graphs."""
        from torch.utils._python_dispatch import TorchDispatchMode

        class Seen(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = set()

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.namespace == "ladder":
                    self.ops.add((func.__name__.split(".")[0], torch.Tag.cudagraph_unsafe in func.tags))
                return func(*args, **(kwargs or {}))

        q, k, v, cu = varlen_args([5, 60])
        dense = [meta(2, 8, 77, 64, grad=True) for _ in range(3)]
        for args, kw, want in ((dense, {}, {("attention_fwd", False), ("attention_bwd", False)}),
                               ([x.requires_grad_() for x in (q, k, v)], {"cu_seqlens": cu, "seqlens": [5, 60]},
                                {("attention_varlen_fwd", True), ("attention_varlen_bwd", True)})):
            with Seen() as seen:
                la.attention(*args, True, **kw).sum().backward()
            self.assertEqual(seen.ops, want)

    def test_fullgraph_varlen_backward_and_new_lengths(self):
        """Varlen forward and backward traced once (aot_eager through the fakes); new lengths of the
        same count in the CPU tensor reuse the graph (its values are read by the real kernel only)."""
        torch._dynamo.reset()
        f = torch.compile(lambda q, k, v, cu, lens: la.attention(q, k, v, True, cu_seqlens=cu, seqlens=lens),
                          fullgraph=True, backend="aot_eager")
        for i, lens in enumerate(([5, 60, 35], [50, 10, 40])):
            q, k, v, cu = varlen_args(lens)
            q, k, v = (x.requires_grad_() for x in (q, k, v))
            stance = torch.compiler.set_stance("fail_on_recompile") if i else contextlib.nullcontext()
            with stance:
                out = f(q, k, v, cu, torch.tensor(lens, dtype=torch.int32))
                out.sum().backward()
            self.assertEqual(out.shape, q.shape)
            self.assertEqual((q.grad.shape, k.grad.shape, v.grad.shape), (q.shape, k.shape, v.shape))


class Capture(unittest.TestCase):
    """ops._run: under CUDA-graph capture only a problem an eager call served may run (the library's
    first call of a problem allocates and zeroes its workspace, which a capture cannot hold)."""

    def setUp(self):
        self.saved = dict(ops.WARM)
        ops.WARM.clear()

    def tearDown(self):
        ops.WARM.clear()
        ops.WARM.update(self.saved)

    def test_first_call_under_capture_is_refused(self):
        ran = []

        def call(vid):
            ran.append(vid)
            if vid == "a/refuses":
                raise la.LadderError("a/refuses does not run B=1: supports D in {128} only")

        key = ("forward", 0, (1, 2, 77, 64), "shape")
        with self.assertRaises(RuntimeError) as cm:
            ops._run("the dense forward (1, 2, 77, 64)", key, ["a/refuses", "b/runs"], call, capturing=True)
        for words in ("during CUDA-graph capture", "never ran eagerly", "one eager call", "(1, 2, 77, 64)",
                      "reduce-overhead"):
            self.assertIn(words, str(cm.exception))
        self.assertEqual(ran, [])  # nothing reached the library
        self.assertEqual(ops._run("p", key, ["a/refuses", "b/runs"], call, capturing=False), "b/runs")
        self.assertEqual(ops.WARM[key], "b/runs")
        ran.clear()
        self.assertEqual(ops._run("p", key, ["a/refuses", "b/runs"], call, capturing=True), "b/runs")
        self.assertEqual(ran, ["b/runs"])  # the eager call's variant only: the refusal is not retried
        other = key[:-1] + ("another shape",)
        self.assertRaises(RuntimeError, ops._run, "p", other, ["b/runs"], call, True)

    def test_failure_under_capture_is_raised(self):
        def call(vid):
            raise la.LadderError("CUDA error cudaErrorStreamCaptureUnsupported")

        ops.WARM[("k",)] = "b/runs"
        with self.assertRaises(la.LadderError) as cm:
            ops._run("p", ("k",), ["b/runs"], call, capturing=True)
        self.assertIn("cudaErrorStreamCaptureUnsupported", str(cm.exception))


class Dispatch(unittest.TestCase):
    def test_table_rules(self):
        for table in (dispatch.FORWARD, dispatch.BACKWARD, dispatch.DETERMINISTIC_BACKWARD):
            for kind, rows in table.items():
                self.assertTrue(rows, kind)
                for r in rows:
                    self.assertIn("/", r.id)
                    self.assertEqual(r.lse, r.id in dispatch.WRITES_LSE, r.id)
                    self.assertTrue(r.peer or not r.id.startswith("9"), r.id)
                flags = [r.peer for r in rows]
                self.assertEqual(flags, sorted(flags), "%s: the peers come last" % kind)
        for kind in dispatch.FORWARD:  # every forward problem has a row writing the LSE on sm_90 (fp16, bf16)
            for dt in ("fp16", "bf16"):
                self.assertTrue(dispatch.forward_candidates(kind, 90, dt, 128, True), (kind, dt))
        self.assertEqual(dispatch.forward_candidates("dense", 90, "fp16", 64, False)[0], "34/three_iterators")
        self.assertEqual(dispatch.forward_candidates("dense", 90, "bf16", 128, False)[0], "33/iterators")
        self.assertEqual(dispatch.forward_candidates("dense", 90, "fp16", 64, True),
                         ["34/three_iterators", "33/iterators", "06/h200", "99/cudnn_lse"])
        self.assertEqual(dispatch.forward_candidates("dense", 90, "bf16", 128, True), ["33/iterators", "99/cudnn_lse"])
        self.assertEqual(dispatch.forward_candidates("varlen", 90, "bf16", 64, True), ["27/longest_first", "99/cudnn_lse"])
        self.assertEqual(dispatch.forward_candidates("dense", 80, "fp16", 64, True), ["06/h200", "99/cudnn_lse"])
        self.assertEqual(dispatch.forward_candidates("dense", 80, "bf16", 64, False), ["99/cudnn", "99/cudnn_lse"])
        self.assertEqual(dispatch.backward_candidates("gqa", 90, "bf16", 64), ["37/group_in_cta"])
        self.assertEqual(dispatch.backward_candidates("dense", 80, "fp16", 64, "deterministic"), ["24/deterministic"])
        self.assertEqual(dispatch.backward_candidates("varlen", 80, "fp16", 64), [])
        self.assertEqual(dispatch.forward_candidates("dense", 90, "fp16", 64, False, "21/snake"), ["21/snake"])

    def test_ids_are_the_librarys(self):
        """Every id the tables name is one `ladder --list` lists (LADDER_BIN: the build's ladder)."""
        ladder = os.environ.get("LADDER_BIN")
        if not ladder or not os.path.exists(ladder):
            self.skipTest("LADDER_BIN (build/<preset>/bin/ladder) not given")
        listing = subprocess.run([ladder, "--list"], capture_output=True, text=True, check=True).stdout
        listed = {w for line in listing.splitlines() for w in line.split()[:1] + line.split()[2:3] if "/" in w}
        # A build without cuDNN lists one stand-in row for its peers (its note says "not built"):
        # the tables' cuDNN ids (steps 98, 99) are then absent by design, not by mistake.
        without_cudnn = "not built" in listing
        missing = [i for i in dispatch.all_ids() if i not in listed]
        if without_cudnn:
            missing = [i for i in missing if not i.startswith(("98/", "99/"))]
        self.assertEqual(missing, [])

    def test_refusals_fall_through_failures_do_not(self):
        ran = []

        def call(vid):
            ran.append(vid)
            if vid == "a/refuses":
                raise la.LadderError("a/refuses does not run B=1 H=1 N=1 D=64: supports D in {128} only")
            if vid == "c/fails":
                raise la.LadderError("CUDA error cudaErrorIllegalAddress")

        self.assertEqual(ops._run_first("p", ["a/refuses", "b/runs", "c/fails"], call), "b/runs")
        with self.assertRaises(la.LadderError) as cm:
            ops._run_first("p", ["c/fails", "b/runs"], call)
        self.assertIn("cudaErrorIllegalAddress", str(cm.exception))
        with self.assertRaises(la.UnsupportedError) as cm:
            ops._run_first("the dense forward", ["a/refuses"], call)
        self.assertIn("supports D in {128} only", str(cm.exception))
        with self.assertRaises(la.UnsupportedError):
            ops._run_first("p", [], call)

    def test_library_message_surfaces(self):
        try:
            la.library()
        except la.LibraryNotFound as e:
            self.skipTest(str(e)[:200])
        from ladder_attention import _lib
        with self.assertRaises(la.LadderError) as cm:
            _lib.call("ladder_attention", "nonsense", 1, 1, 1, 64, 0, 0, None, None, None, None, None, None)
        self.assertIn("variant ids look like", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
