"""A stand-in for the few parts of PyTorch that scripts/peers.py uses, on numpy, so that its main
loop (rows, output checks, FA4's layout, the JSON) runs in a CPU test. Timings are meaningless;
graphs capture nothing (a replay does no work). tests/cpu/test_scripts.py puts this folder first on
sys.path; never on a GPU machine's path.

For the backward (scripts/peers.py --pass bwd): a tensor made by the stand-in attention from inputs
that require gradients carries its exact backward (numpy), which torch.autograd.grad calls.

For --pass serve: reshape/permute, indexing by an index tensor (the page pools), softmax, int32
tensors (cu_seqlens, block tables; held as float32 like the rest, exact below 2^24)."""
import contextlib

import numpy as np

__version__ = "0.0-fake"


class _DType:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


float16, bfloat16, float32, int32, int64 = (_DType(n) for n in ("float16", "bfloat16", "float32", "int32", "int64"))
_rng = np.random.default_rng(0)


class Tensor:
    def __init__(self, a, dtype=float32):
        a = np.asarray(a)
        self.a = a if a.dtype == bool else a.astype(np.float32, copy=False)
        self.dtype = dtype
        self.requires_grad = False
        self._backward = None  # (inputs, fn(grad array) -> gradient arrays of those inputs)

    shape = property(lambda self: tuple(self.a.shape))
    device = "cuda"

    def transpose(self, i, j):
        return Tensor(np.swapaxes(self.a, i, j), self.dtype)

    def contiguous(self):
        return Tensor(np.ascontiguousarray(self.a).copy(), self.dtype)

    def float(self):
        return Tensor(self.a, float32)

    def abs(self):
        return Tensor(np.abs(self.a), self.dtype)

    def max(self):
        return Tensor(self.a.max(), self.dtype)

    def __sub__(self, other):
        return Tensor(self.a - other.a, self.dtype)

    def __float__(self):
        return float(self.a)

    def zero_(self):
        self.a[...] = 0
        return self

    def copy_(self, other):
        self.a[...] = other.a
        return self

    def data_ptr(self):
        return self.a.ctypes.data

    def detach(self):
        return Tensor(self.a, self.dtype)

    def clone(self):
        return Tensor(self.a.copy(), self.dtype)

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    def __getitem__(self, index):
        return Tensor(self.a[_index(index)], self.dtype)

    def __setitem__(self, index, value):
        self.a[_index(index)] = value.a if isinstance(value, Tensor) else value

    def reshape(self, *shape):
        return Tensor(self.a.reshape(*shape), self.dtype)

    def permute(self, *dims):
        return Tensor(np.transpose(self.a, dims), self.dtype)

    def to(self, dtype):
        return Tensor(self.a, dtype)

    def __add__(self, x):
        return Tensor(self.a + (x.a if isinstance(x, Tensor) else x), self.dtype)

    def __mul__(self, x):
        return Tensor(self.a * (x.a if isinstance(x, Tensor) else x), self.dtype)

    def __gt__(self, other):
        return Tensor(self.a > (other.a if isinstance(other, Tensor) else other))

    def masked_fill(self, mask, value):
        return Tensor(np.where(mask.a, np.float32(value), self.a), self.dtype)


def _index(index):
    """An index tensor (torch's advanced indexing) as numpy's integer array."""
    if isinstance(index, Tensor):
        return index.a.astype(np.int64)
    if isinstance(index, tuple):
        return tuple(_index(i) for i in index)
    return index


def manual_seed(seed):
    global _rng
    _rng = np.random.default_rng(seed)


def randn(*shape, dtype=float32, device=None):
    n = int(np.prod(shape))
    return Tensor(_rng.standard_normal(shape) if n < 10**6 else np.zeros(shape), dtype)


def empty(*shape, dtype=float32, device=None):
    return Tensor(np.zeros(shape), dtype)


def zeros(*shape, dtype=float32, device=None):
    return Tensor(np.zeros(shape), dtype)


def full(shape, value, dtype=float32, device=None):
    return Tensor(np.full(shape, value), dtype)


def tensor(values, dtype=float32, device=None):
    return Tensor(np.array(values), dtype)


def randperm(n, device=None):
    return Tensor(_rng.permutation(n), int32)


def softmax(t, dim):
    e = np.exp(t.a - t.a.max(axis=dim, keepdims=True))
    return Tensor(e / e.sum(axis=dim, keepdims=True), t.dtype)


def empty_like(t):
    return Tensor(np.full(t.shape, np.nan), t.dtype)


def matmul(a, b, out=None):  # the GEMM ceiling's 8192^3 (into `out`): not computed here
    return out if out is not None else Tensor(a.a @ b.a, a.dtype)


def sum(t, dim=None, keepdim=False, out=None):  # noqa: A001  (torch.sum; peers_timing.L2Flush's read)
    r = t.a.sum() if dim is None else t.a.sum(axis=dim, keepdims=keepdim)
    if out is None:
        return Tensor(r, t.dtype)
    out.a[...] = r
    return out


def arange(start, end=None, device=None):
    return Tensor(np.arange(start, end) if end is not None else np.arange(start))


def logsumexp(t, dim):
    m = t.a.max(axis=dim, keepdims=True)
    return Tensor(np.squeeze(m, dim) + np.log(np.exp(t.a - m).sum(axis=dim)), t.dtype)


class _Autograd:
    @staticmethod
    def grad(out, inputs, grad_output, retain_graph=False):
        """The gradients of `out` for `inputs` (which must be the inputs the stand-in recorded)."""
        recorded, backward = out._backward
        grads = backward(grad_output.a)
        by_id = {id(x): g for x, g in zip(recorded, grads)}
        return tuple(Tensor(by_id[id(x)], x.dtype) for x in inputs)


autograd = _Autograd()


class _Version:
    cuda = "13.0-fake"


version = _Version()


class _Cudnn:
    @staticmethod
    def version():
        return 0


class _Backends:
    cudnn = _Cudnn()


backends = _Backends()


class _Props:
    name, multi_processor_count, major, minor, L2_cache_size = "Fake GPU", 1, 9, 0, 4096


class _Event:
    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, end):  # a fixed 1 ms: the timing loops run their minimum
        return 1.0


class _Stream:
    cuda_stream = 0

    def wait_stream(self, other):
        pass


class _Graph:
    def replay(self):
        pass


class _Cuda:
    Event, Stream, CUDAGraph = _Event, _Stream, _Graph

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_properties(i):
        return _Props()

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def current_stream():
        return _Stream()

    @staticmethod
    @contextlib.contextmanager
    def stream(s):
        yield

    @staticmethod
    @contextlib.contextmanager
    def graph(g, stream=None):
        yield


cuda = _Cuda()
from . import nn  # noqa: E402,F401
