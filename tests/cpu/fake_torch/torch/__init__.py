"""A stand-in for the few parts of PyTorch that scripts/peers.py uses, on numpy, so that its main
loop (rows, output checks, FA4's layout, the JSON) runs in a CPU test. Timings are meaningless;
graphs capture nothing (a replay does no work). tests/cpu/test_scripts.py puts this folder first on
sys.path; never on a GPU machine's path."""
import contextlib

import numpy as np

__version__ = "0.0-fake"


class _DType:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


float16, bfloat16, float32 = _DType("float16"), _DType("bfloat16"), _DType("float32")
_rng = np.random.default_rng(0)


class Tensor:
    def __init__(self, a, dtype=float32):
        self.a = np.asarray(a, dtype=np.float32)
        self.dtype = dtype

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


def manual_seed(seed):
    global _rng
    _rng = np.random.default_rng(seed)


def randn(*shape, dtype=float32, device=None):
    n = int(np.prod(shape))
    return Tensor(_rng.standard_normal(shape) if n < 10**6 else np.zeros(shape), dtype)


def empty(*shape, dtype=float32, device=None):
    return Tensor(np.zeros(shape), dtype)


def empty_like(t):
    return Tensor(np.full(t.shape, np.nan), t.dtype)


def matmul(a, b, out=None):  # the GEMM ceiling's 8192^3: not computed here
    return out


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
    def graph(g):
        yield


cuda = _Cuda()
from . import nn  # noqa: E402,F401
