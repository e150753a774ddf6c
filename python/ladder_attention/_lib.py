"""libladder_capi.so, found and opened on the first real call (never at import: the fake kernels,
the schema and the argument checks need no library), and its four entry points as Python calls that
raise LadderError with the library's own message when a call returns 1.

Where the library is looked for, first match wins:
  1. $LADDER_CAPI_LIB, a path to libladder_capi.so (an error if that file does not exist);
  2. the path `pip install python` recorded when it built the ladder_capi target
     (ladder_attention/_build_config.py, written by python/setup.py);
  3. $LADDER_BUILD_DIR/lib, then the repository's build/gpu, build/h200 and build/ci (a source
     checkout on PYTHONPATH without an install).

The library is opened RTLD_LOCAL after torch is imported, as scripts/peers.py opens it (issue 13:
it exports its four functions and nothing else, so PyTorch's own cuDNN frontend and CCCL stay
PyTorch's)."""
import ctypes
import os
import pathlib
import threading

import torch  # noqa: F401  (first: PyTorch's CUDA runtime and cuDNN load before the library's)

_PACKAGE = pathlib.Path(__file__).resolve().parent
_REPO = _PACKAGE.parents[1]  # python/ladder_attention -> the repository (a source checkout)
_NAME = "libladder_capi.so"
_lock = threading.Lock()
_lib = None


class LadderError(RuntimeError):
    """A call into libladder_capi.so returned 1: the message is the library's."""


class LibraryNotFound(RuntimeError):
    """No libladder_capi.so where the package looks (see the module's docstring)."""


def candidates():
    """[(path, where it came from)] in the order they are tried."""
    out = []
    env = os.environ.get("LADDER_CAPI_LIB")
    if env:
        return [(pathlib.Path(env), "$LADDER_CAPI_LIB")]
    try:
        from . import _build_config  # written at build time; absent in a plain checkout
        out.append((pathlib.Path(_build_config.LIBRARY), "recorded by pip install"))
    except ImportError:
        pass
    if os.environ.get("LADDER_BUILD_DIR"):
        out.append((pathlib.Path(os.environ["LADDER_BUILD_DIR"]) / "lib" / _NAME, "$LADDER_BUILD_DIR"))
    for preset in ("gpu", "h200", "ci"):
        out.append((_REPO / "build" / preset / "lib" / _NAME, "the repository's build/" + preset))
    return out


def library_path():
    """The libladder_capi.so the package would open, or raise LibraryNotFound saying how to build it."""
    tried = candidates()
    for path, _ in tried:
        if path.is_file():
            return path
    looked = "; ".join("%s (%s)" % (p, why) for p, why in tried)
    raise LibraryNotFound(
        "ladder_attention needs libladder_capi.so (the CMake target ladder_capi) and found none. Build "
        "and record it with `python3 -m pip install --no-build-isolation -e python` from the repository (set "
        "LADDER_BUILD_DIR to reuse a build directory), or `cmake --preset gpu && cmake --build build/gpu "
        "--target ladder_capi`, or point LADDER_CAPI_LIB at the file. Looked at: " + looked)


def _declare(lib):
    i, p, s = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
    lens = ctypes.POINTER(ctypes.c_int)
    sig = {
        "ladder_attention": [s] + [i] * 6 + [p] * 6 + [s, i],
        "ladder_attention_backward": [s] + [i] * 6 + [p] * 10 + [s, i],
        "ladder_attention_serving": [s] + [i] * 8 + [lens, lens] + [p] * 2 + [i] + [p] * 7 + [s, i],
        "ladder_attention_backward_serving": [s] + [i] * 7 + [lens] + [p] * 11 + [s, i],
    }
    for name, argtypes in sig.items():
        f = getattr(lib, name, None)
        if f is None:
            raise LadderError("%s has no %s: it was built from an older tree; rebuild the ladder_capi target"
                              % (lib._name, name))
        f.argtypes, f.restype = argtypes, ctypes.c_int
    return lib


def library():
    """The opened library (opened once, on the first call)."""
    global _lib
    with _lock:
        if _lib is None:
            path = library_path()
            try:
                _lib = _declare(ctypes.CDLL(str(path), mode=os.RTLD_LOCAL))
            except OSError as e:
                raise LibraryNotFound("could not open %s: %s" % (path, e)) from e
        return _lib


def host_ints(values):
    """A ctypes int array of a Python sequence, or None for None."""
    if values is None:
        return None
    return (ctypes.c_int * len(values))(*values)


def call(name, variant, *args):
    """libladder_capi.<name>(variant, *args, error, len): returns 0, or raises LadderError."""
    err = ctypes.create_string_buffer(1024)
    rc = getattr(library(), name)(variant.encode(), *args, err, len(err))
    if rc != 0:
        raise LadderError(err.value.decode(errors="replace") or "%s(%s) returned %d" % (name, variant, rc))
