#!/usr/bin/env python3
"""libladder_capi.so must export ladder_attention, ladder_attention_serving,
ladder_attention_backward and ladder_attention_backward_serving and nothing else
(common/apps/capi.map says why: inside PyTorch's process, any other exported or GNU_UNIQUE symbol --
the cuDNN frontend's, nlohmann's, CCCL's -- can bind to, or be bound by, another library's copy of
the same name).

    python3 tests/cpu/check_capi_exports.py build/h200/lib/libladder_capi.so

Exit 0: exactly those four; 1: one missing, or other symbols (listed); 77: no `nm` on this machine.
"""
import shutil
import subprocess
import sys

EXPORTS = {"ladder_attention", "ladder_attention_serving", "ladder_attention_backward",
           "ladder_attention_backward_serving"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    nm = shutil.which("nm")
    if not nm:
        print("SKIPPED: no nm (binutils) on this machine")
        return 77
    out = subprocess.run([nm, "-D", "--defined-only", sys.argv[1]], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    missing = sorted(EXPORTS - names)
    extra = sorted(names - EXPORTS)
    if missing:
        print("FAILED: not exported: " + ", ".join(missing))
        return 1
    if extra:
        unique = sum(1 for line in out.stdout.splitlines() if " u " in line)
        print("FAILED: %d symbols besides %s are exported (%d of them GNU_UNIQUE), e.g.:"
              % (len(extra), ", ".join(sorted(EXPORTS)), unique))
        for name in extra[:20]:
            print("  " + name)
        return 1
    print("ok: exports " + ", ".join(sorted(EXPORTS)) + " only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
