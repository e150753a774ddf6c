# Sourced by the GPU round scripts: where PyTorch's pip-installed cuDNN is (site-packages/nvidia/cudnn),
# so that the ladder's cuDNN row (step 99) uses the library PyTorch's SDPA uses, and cuDNN's
# sub-libraries (libcudnn_graph, libcudnn_engines_*), which it loads by name, are on the path.
# Sets LADDER_CUDNN_ARGS (CMake arguments: -DCUDNN_ROOT=... when that cuDNN ships headers) and
# extends LD_LIBRARY_PATH. Harmless where there is no such cuDNN: the toolkit's is used, or none.
LADDER_CUDNN_ARGS=""
ladder_torch_cudnn=$(python3 - 2>/dev/null <<'PY'
import glob, os, sys
hits = [h for p in sys.path for h in sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib", "libcudnn.so.9")))]
if hits:
    print(os.path.dirname(os.path.dirname(hits[0])))
PY
)
if [ -n "$ladder_torch_cudnn" ] && ls "$ladder_torch_cudnn"/lib/libcudnn.so* >/dev/null 2>&1; then
  export LD_LIBRARY_PATH="$ladder_torch_cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -f "$ladder_torch_cudnn/include/cudnn.h" ] && LADDER_CUDNN_ARGS="-DCUDNN_ROOT=$ladder_torch_cudnn"
fi
# The frontend's headers: scripts/install-deps.sh puts them in .deps (a GPU machine without network
# gets that folder carried with the tree).
if [ -f .deps/cudnn_frontend/include/cudnn_frontend.h ]; then
  LADDER_CUDNN_ARGS="$LADDER_CUDNN_ARGS -DCUDNN_FRONTEND_INCLUDE_DIR=$PWD/.deps/cudnn_frontend/include"
fi
