"""Builds the CMake target ladder_capi (libladder_capi.so) while the package is installed, and
records its path in ladder_attention/_build_config.py, where the package looks first.

Environment (all optional):
  LADDER_CAPI_LIB=/path/libladder_capi.so  use that file: nothing is built
  LADDER_BUILD_DIR=DIR    build in DIR (relative: to the repository's root); one already configured
                          (DIR/CMakeCache.txt) is only built, another is configured with the preset
  LADDER_PRESET=NAME      the CMake preset that configures (default gpu: this machine's GPU)
  LADDER_SKIP_BUILD=1     build nothing, record nothing (the package then searches at run time)
  CMAKE_BUILD_PARALLEL_LEVEL  cmake --build's parallelism (CMake's own variable)
"""
import os
import pathlib
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent  # the repository: python/ sits in it
CONFIG = HERE / "ladder_attention" / "_build_config.py"


def run(cmd):
    print("ladder_attention: " + " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True)


def build_library():
    """The path of libladder_capi.so, built if need be; None with LADDER_SKIP_BUILD."""
    if os.environ.get("LADDER_CAPI_LIB"):
        lib = pathlib.Path(os.environ["LADDER_CAPI_LIB"]).resolve()
        if not lib.is_file():
            raise SystemExit("LADDER_CAPI_LIB=%s: no such file" % lib)
        return lib
    if os.environ.get("LADDER_SKIP_BUILD") == "1":
        return None
    if not (ROOT / "CMakePresets.json").is_file():
        raise SystemExit("ladder_attention builds from the repository (%s has no CMakePresets.json): install "
                         "it from a checkout, or set LADDER_CAPI_LIB" % ROOT)
    cmake = shutil.which("cmake")
    if not cmake:
        raise SystemExit("ladder_attention needs cmake (and nvcc, ninja) to build libladder_capi.so; or set "
                         "LADDER_CAPI_LIB to a built one")
    preset = os.environ.get("LADDER_PRESET", "gpu")
    build = os.environ.get("LADDER_BUILD_DIR")
    build_dir = (ROOT / build).resolve() if build else ROOT / "build" / preset
    if not (build_dir / "CMakeCache.txt").is_file():
        run([cmake, "--preset", preset] + (["-B", build_dir] if build else []))
    run([cmake, "--build", build_dir, "--target", "ladder_capi"])
    lib = build_dir / "lib" / "libladder_capi.so"
    if not lib.is_file():
        raise SystemExit("the ladder_capi target built, but %s is not there" % lib)
    return lib


class BuildPyWithLibrary(build_py):
    def run(self):
        lib = build_library()
        if lib is not None:
            CONFIG.write_text('"""Written by python/setup.py when the package was installed."""\n'
                              "LIBRARY = %r\n" % str(lib))
        elif CONFIG.exists():
            CONFIG.unlink()
        super().run()


setup(cmdclass={"build_py": BuildPyWithLibrary})
