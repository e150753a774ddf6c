"""The ladder's own kernels in scripts/peers.py's process: libladder_capi.so loaded through ctypes
(several labelled builds side by side, each RTLD_LOCAL), the variant ids and old>new pairs parsed, and
the forward, backward and serving calls on PyTorch tensors."""
import ctypes
import os

from peers_torch import torch


class LadderLibs:
    """The ladder's C interfaces (libladder_capi.so), each loaded RTLD_LOCAL under a label.

    dlopen returns one handle per file (same device and inode), so two labels of one file would
    share one registry: that is refused. Within a process, a library loaded RTLD_LOCAL resolves its
    own symbols (the step registry, Registry::instance) before any other local library's; the few
    GNU-unique objects the libraries share (cuDNN frontend and CUB caches, the driver's
    tensor-map entry point) hold the same values in both builds."""

    def __init__(self, specs):
        self.paths = parse_ladder_libs(specs)
        self.fns = {}
        self.backward_fns = {}
        self.serving_fns = {}
        self.backward_serving_fns = {}
        for label, path in self.paths.items():
            lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
            f = lib.ladder_attention
            f.argtypes = ([ctypes.c_char_p] + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 6
                          + [ctypes.c_char_p, ctypes.c_int])
            f.restype = ctypes.c_int
            self.fns[label] = f
            # ladder_attention_backward: in libraries built from Part V on (an older one has none)
            b = getattr(lib, "ladder_attention_backward", None)
            if b is not None:
                b.argtypes = ([ctypes.c_char_p] + [ctypes.c_int] * 6 + [ctypes.c_void_p] * 10
                              + [ctypes.c_char_p, ctypes.c_int])
                b.restype = ctypes.c_int
            self.backward_fns[label] = b
            # ladder_attention_serving: in libraries built from Part VI on
            f = getattr(lib, "ladder_attention_serving", None)
            if f is not None:
                lens = ctypes.POINTER(ctypes.c_int)
                f.argtypes = ([ctypes.c_char_p] + [ctypes.c_int] * 8 + [lens, lens]
                              + [ctypes.c_void_p] * 2 + [ctypes.c_int] + [ctypes.c_void_p] * 7
                              + [ctypes.c_char_p, ctypes.c_int])
                f.restype = ctypes.c_int
            self.serving_fns[label] = f
            # ladder_attention_backward_serving: the backward on GQA and varlen (later still)
            f = getattr(lib, "ladder_attention_backward_serving", None)
            if f is not None:
                f.argtypes = ([ctypes.c_char_p] + [ctypes.c_int] * 7 + [ctypes.POINTER(ctypes.c_int)]
                              + [ctypes.c_void_p] * 11 + [ctypes.c_char_p, ctypes.c_int])
                f.restype = ctypes.c_int
            self.backward_serving_fns[label] = f

    def call(self, label, variant, *args):
        return self.fns[label](variant.encode(), *args)

    def call_backward(self, label, variant, *args):
        if self.backward_fns[label] is None:
            raise RuntimeError(f"{self.paths[label]} has no ladder_attention_backward (built before Part V)")
        return self.backward_fns[label](variant.encode(), *args)

    def call_backward_serving(self, label, variant, *args):
        if self.backward_serving_fns[label] is None:
            raise RuntimeError(f"{self.paths[label]} has no ladder_attention_backward_serving "
                               "(built before the backward's GQA and varlen)")
        return self.backward_serving_fns[label](variant.encode(), *args)

    def call_serving(self, label, variant, *args):
        if self.serving_fns[label] is None:
            raise RuntimeError(f"{self.paths[label]} has no ladder_attention_serving (built before Part VI)")
        return self.serving_fns[label](variant.encode(), *args)


def parse_ladder_libs(specs):
    """--ladder-lib values, PATH or LABEL=PATH, as {label: path} ("" for the unlabelled one)."""
    libs, files = {}, {}
    for spec in specs or []:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = "", spec
        elif not label or not label.replace("_", "").replace("-", "").isalnum():
            raise SystemExit(f"--ladder-lib {spec}: a label is letters, digits, - or _ (old=PATH)")
        if label in libs:
            raise SystemExit(f"--ladder-lib: the label '{label or '(none)'}' is given twice")
        if not os.path.isfile(path):
            raise SystemExit(f"--ladder-lib {spec}: no file {path}")
        st = os.stat(path)
        if (st.st_dev, st.st_ino) in files:
            raise SystemExit(f"--ladder-lib {spec}: the same file as '{files[(st.st_dev, st.st_ino)]}'; "
                             "dlopen would give both one handle and one registry: copy it first")
        files[(st.st_dev, st.st_ino)] = label or path
        libs[label] = os.path.abspath(path)
    if "" in libs and len(libs) > 1:
        raise SystemExit("--ladder-lib: with several libraries, label each (old=PATH new=PATH)")
    return libs


def parse_variant(spec, labels):
    """'LABEL:NN/name' or 'NN/name' (the only library) as (label, 'NN/name')."""
    label, sep, vid = spec.rpartition(":")
    if not sep:
        if len(labels) != 1:
            raise SystemExit(f"variant {spec}: say which library (one of {', '.join(sorted(labels))}: LABEL:{spec})")
        label, vid = next(iter(labels)), spec
    if label not in labels:
        raise SystemExit(f"variant {spec}: no --ladder-lib labelled '{label}'")
    if "/" not in vid:
        raise SystemExit(f"variant {spec}: ids look like 20/persistent")
    return label, vid


def row_name(label, vid):
    return "ladder:" + (f"{label}:" if label else "") + vid


def parse_pairs(text, labels):
    """--ladder-pairs 'old:A>new:B,...' as [((label, id), (label, id))]."""
    pairs = []
    for item in [x for x in text.split(",") if x]:
        old, sep, new = item.partition(">")
        if not sep:
            raise SystemExit(f"--ladder-pairs {item}: write OLD>NEW, e.g. old:20/persistent_snake>new:21/snake")
        pairs.append((parse_variant(old, labels), parse_variant(new, labels)))
    return pairs


def ladder_call(libs, label, variant, q, k, v, causal, bf16):
    """A callable that runs `variant` of library `label` on q, k, v into its own O (returned)."""
    o = torch.empty_like(q)
    bsz, heads, n, d = q.shape
    lse = torch.empty(bsz, heads, n, dtype=torch.float32, device=q.device)
    err = ctypes.create_string_buffer(1024)

    def call():
        rc = libs.call(label, variant, bsz, heads, n, d, int(causal), int(bf16), q.data_ptr(), k.data_ptr(),
                       v.data_ptr(), o.data_ptr(), lse.data_ptr(), torch.cuda.current_stream().cuda_stream,
                       err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, o


def ladder_backward_call(libs, label, variant, q, k, v, o, d_o, lse, causal, bf16):
    """A callable that runs backward `variant` of library `label` into its own dQ, dK, dV (returned
    as a tuple), from q, k, v, the forward's o and lse, and d_o."""
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    bsz, heads, n, d = q.shape
    err = ctypes.create_string_buffer(1024)

    def call():
        rc = libs.call_backward(label, variant, bsz, heads, n, d, int(causal), int(bf16), q.data_ptr(),
                                k.data_ptr(), v.data_ptr(), o.data_ptr(), d_o.data_ptr(), lse.data_ptr(),
                                dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                                torch.cuda.current_stream().cuda_stream, err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, (dq, dk, dv)


def ladder_serving_call(libs, label, variant, s, q, k, v, bf16, cu_q=None, cu_k=None, block_table=None):
    """A callable that runs `variant` of library `label` through ladder_attention_serving on q, k, v
    (the ladder's layouts for shape s: common/problem.hpp) into its own O (returned)."""
    o = torch.empty_like(q)
    if s["q_lens"]:
        lse = torch.empty(s["heads"], q.shape[0], dtype=torch.float32, device=q.device)
        lens = (ctypes.c_int * s["batch"])(*s["q_lens"])
    else:
        lse = torch.empty(s["batch"], s["heads"], s["seqlen"], dtype=torch.float32, device=q.device)
        lens = None
    err = ctypes.create_string_buffer(1024)
    ptr = lambda t: t.data_ptr() if t is not None else None  # noqa: E731

    def call():
        rc = libs.call_serving(label, variant, s["batch"], s["heads"], s["kv_heads"], s["seqlen"],
                               0 if s["q_lens"] else s["kv_seqlen"], s["head_dim"], int(s["causal"]),
                               int(bf16), lens, None, ptr(cu_q), ptr(cu_k), s["page_size"], ptr(block_table),
                               q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
                               torch.cuda.current_stream().cuda_stream, err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, o


def ladder_backward_serving_call(libs, label, variant, s, q, k, v, o, d_o, lse, bf16, cu=None):
    """A callable that runs backward `variant` of library `label` through
    ladder_attention_backward_serving into its own dQ, dK, dV (returned as a tuple), from q, k, v, the
    forward's o and lse and d_o in the ladder's layouts for shape s (peers_serve.serve_shape): dense
    GQA [B, H(kv), N, D] and lse [B, H, N]; varlen (s["q_lens"], cu the device prefix sums) packed
    [total, H(kv), D] and lse [H, total]."""
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    lens = (ctypes.c_int * s["batch"])(*s["q_lens"]) if s["q_lens"] else None
    err = ctypes.create_string_buffer(1024)

    def call():
        rc = libs.call_backward_serving(label, variant, s["batch"], s["heads"], s["kv_heads"], s["seqlen"],
                                        s["head_dim"], int(s["causal"]), int(bf16), lens,
                                        cu.data_ptr() if cu is not None else None, q.data_ptr(), k.data_ptr(),
                                        v.data_ptr(), o.data_ptr(), d_o.data_ptr(), lse.data_ptr(), dq.data_ptr(),
                                        dk.data_ptr(), dv.data_ptr(), torch.cuda.current_stream().cuda_stream,
                                        err, len(err))
        if rc:
            raise RuntimeError(err.value.decode())
    return call, (dq, dk, dv)
