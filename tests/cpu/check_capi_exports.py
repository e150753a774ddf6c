#!/usr/bin/env python3
"""libladder_capi.so must export ladder_attention and nothing else (common/apps/capi.map says why:
inside PyTorch's process, any other exported or GNU_UNIQUE symbol -- the cuDNN frontend's, nlohmann's,
CCCL's -- can bind to, or be bound by, another library's copy of the same name).

    python3 tests/cpu/check_capi_exports.py build/h200/lib/libladder_capi.so

Exit 0: only ladder_attention; 1: other symbols (listed); 77: no `nm` on this machine.
"""
import shutil
import subprocess
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    nm = shutil.which("nm")
    if not nm:
        print("SKIPPED: no nm (binutils) on this machine")
        return 77
    out = subprocess.run([nm, "-D", "--defined-only", sys.argv[1]], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    extra = sorted(names - {"ladder_attention"})
    if "ladder_attention" not in names:
        print("FAILED: ladder_attention is not exported")
        return 1
    if extra:
        unique = sum(1 for line in out.stdout.splitlines() if " u " in line)
        print("FAILED: %d symbols besides ladder_attention are exported (%d of them GNU_UNIQUE), e.g.:"
              % (len(extra), unique))
        for name in extra[:20]:
            print("  " + name)
        return 1
    print("ok: exports ladder_attention only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
