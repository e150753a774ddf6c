#!/usr/bin/env python3
"""Lab 13's checker (given, do not edit): shared memory by name.

  labs/check.sh L13 [--solution] [--cpu]     (or run this file directly)

  1. your file, outside the marked region (the body of aligned_storage), is the reference's, line
     for line; the region declares no __shared__ variable, includes nothing, and does not call
     chapter 36's aligned_smem_shared (the answer: write it yourself);
  2. the address, on the CPU: your aligned_storage(raw), compiled for the host, returns raw
     rounded up to the next multiple of 1024 for every 16-byte-aligned raw (skipped, not failed,
     if your function calls device-only code: part 4 checks the address then);
  3. the SASS: your file compiles for sm_90a with the project's flags, and cuobjdump -sass of
     ds_tile_kernel is read for its shared-memory accesses: generic LD/ST against LDS/STS, beside
     the starter's. Pass: no generic LD or ST at all, and at least as many LDS/STS as the
     starter's kernel has accesses of both kinds (each generic access became a shared one);
  4. with a GPU (compute capability 8.0 or newer): the driver run.cu runs your kernel and checks
     ds and the total against fp64 and the Storage's alignment, then runs the starter's kernel on
     the same inputs: your outputs must be the starter's bit for bit (the arithmetic is the same).

Parts 1-3 need no GPU. Exit: 0 every check passed; 1 a check failed (the lines say which and why);
2 bad usage or your file did not compile; 77 what could run passed, but part 4 found no GPU (with
--cpu, exit 0 then), or no cuobjdump/nvdisasm was found for part 3 (skipped).

Options: --solution (the reference in solution/), --file PATH (another copy of the kernel file),
--cpu (parts 1-3 only), --nvcc PATH, --cuobjdump PATH, --nvdisasm PATH (or $CUOBJDUMP,
$NVDISASM), --build DIR (where the objects, the executables and the SASS go; default
build/labs-L13[-solution]), --starter-build DIR (where the starter's are kept; default
BUILD/starter), --no-time (accepted: this lab times nothing), --selftest (the checker's own test:
known-bad files must fail with the right diagnosis, other right answers must pass).
"""
import argparse
import collections
import hashlib
import os
import pathlib
import re
import shutil
import struct
import subprocess
import sys
import sysconfig

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import wait_placement  # noqa: E402  the cuobjdump -sass parser chapter 31 uses (functions)
import lab_selftest  # noqa: E402  the script-checker labs' selftest loop

LAB = "L13"
KERNEL_FILE = "shared_by_name.cu"
KERNEL_NAME = "ds_tile_kernel"
BEGIN = "// ==== L13: your edit begins"
END = "// ==== L13: your edit ends"
ALIGN = 1024
# The region as the starter has it (the integer round trip), to rebuild the starter's kernel from
# the reference: its counts and outputs are what yours are compared with, however you edited it.
STARTER_REGION = [
    "// The dynamic shared memory base `raw`, rounded up to the next multiple of kAlign, as a Storage.",
    "// TODO(L13): every access through the Storage is a generic LD/ST in the SASS. Make each one an",
    "// LDS/STS: the same address, the same Storage, the same arithmetic; only this function changes",
    "// (labs/check.sh L13 counts the instructions).",
    "__device__ __forceinline__ Storage& aligned_storage(unsigned char* raw) {",
    "  const std::uintptr_t base = (reinterpret_cast<std::uintptr_t>(raw) + kAlign - 1) & ~std::uintptr_t(kAlign - 1);",
    "  return *reinterpret_cast<Storage*>(base);",
    "}",
]
# What the region may not contain: (regex on the code, without comments; why).
REFUSED = [
    (r"\baligned_smem_shared\b", "calls aligned_smem_shared, chapter 36's helper in common/device/hopper/smem.cuh: "
     "it is this lab's answer, so the lab asks you to write the function yourself"),
    (r"__shared__", "declares a __shared__ variable: the Storage stays where the launch put it, in the dynamic "
     "shared memory after `raw` (a named array would change the layout the kernel asked for)"),
    (r"^\s*#\s*include", "includes a header: the kernel file is self-contained, and the fix needs none"),
]
# The project's flags for sm_90a code (CMakePresets.json's h200 preset, what CMake passes), and
# compute_80 PTX beside the sm_90a code so that the driver also runs on other GPUs (the PTX is
# compiled for the GPU when the program loads; cuobjdump -sass reads the sm_90a code only).
NVCC_FLAGS = ["-O3", "-DNDEBUG", "--generate-code=arch=compute_90a,code=[sm_90a]",
              "--generate-code=arch=compute_80,code=[compute_80]", "-std=c++20", "--expt-relaxed-constexpr"]
PASS, FAIL, USAGE, SKIP = 0, 1, 2, 77


def shown(path):
    path = pathlib.Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# ---- 1. the region ---------------------------------------------------------------------------
def split_region(text, name):
    """(lines before and with the begin marker, the region's lines, lines from the end marker on),
    or a string saying what is wrong with the markers."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    begins = [i for i, ln in enumerate(lines) if BEGIN in ln]
    ends = [i for i, ln in enumerate(lines) if END in ln]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        return (f"{name}: the two markers '{BEGIN} ...' and '{END} ...' must each appear once, in "
                f"that order (found {len(begins)} and {len(ends)}); restore them from the starter")
    b, e = begins[0], ends[0]
    return lines[: b + 1], lines[b + 1: e], lines[e:]


def starter_text(reference):
    """The starter's kernel file: the reference with the starter's region."""
    head, _, tail = split_region(reference.read_text(), str(reference))
    return "\n".join(head + STARTER_REGION + tail) + "\n"


def check_region(path, reference):
    """None if `path` equals `reference` outside the region and its region is allowed, else why not."""
    mine, ref = split_region(path.read_text(), path.name), split_region(reference.read_text(), str(reference))
    if isinstance(ref, str):
        return "the reference file is damaged: " + ref
    if isinstance(mine, str):
        return mine
    offset = len(mine[0]) + len(mine[1])  # line number of the end marker in your file, minus one
    for part, ours, theirs, first in (("before", mine[0], ref[0], 0), ("after", mine[2], ref[2], offset)):
        for i in range(max(len(ours), len(theirs))):
            a = ours[i] if i < len(ours) else "<end of file>"
            t = theirs[i] if i < len(theirs) else "<end of file>"
            if a != t:
                return (f"{path.name}:{first + i + 1} is {part} the marked region and differs from the reference "
                        f"(only the region may change):\n      yours:     {a.strip()}\n      reference: {t.strip()}")
    for i, ln in enumerate(mine[1]):
        code = ln.split("//")[0]
        for pattern, why in REFUSED:
            if re.search(pattern, code):
                return f"{path.name}:{len(mine[0]) + i + 1}: the region {why}"
    return None


# ---- tools -------------------------------------------------------------------------------------
def find_nvcc(given):
    for c in (given, os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and os.access(c, os.X_OK):
            return c
    return None


def find_tool(tool, given, nvcc):
    """cuobjdump or nvdisasm (cuobjdump -sass runs it): the option, $CUOBJDUMP or $NVDISASM, PATH,
    next to nvcc, in .deps/cuobjdump/bin (where scripts/install-deps.sh unpacks PyPI's
    nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm), or where pip installs those wheels in this
    Python's site-packages."""
    cands = [given, os.environ.get(tool.upper()), shutil.which(tool)]
    if nvcc:
        cands.append(str(pathlib.Path(nvcc).resolve().parent / tool))
    cands.append(str(ROOT / ".deps" / "cuobjdump" / "bin" / tool))
    for key in ("purelib", "platlib"):
        site = pathlib.Path(sysconfig.get_paths()[key]) / "nvidia"
        cands += [str(p) for p in sorted(site.glob(f"cu*/bin/{tool}"))]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    return None


def nvcc_run(cmd):
    """(ok, ptxas's register line for the kernel, the messages without ptxas's -v noise)."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    noise = re.compile(r"^ptxas info|^\s+\d+ bytes stack frame")
    messages = "\n".join(ln for ln in out.splitlines() if not noise.match(ln))
    regs = ""
    m = re.search(r"Compiling entry function '(\S*" + KERNEL_NAME + r"\S*)'.*?(\d+) bytes spill stores.*?Used (\d+) registers",
                  out, re.S)
    if m:
        regs = f"{m.group(3)} registers, {m.group(2)} bytes spilled"
    if r.returncode != 0:
        messages += "\n  (command: " + " ".join(cmd) + ")"
    return r.returncode == 0, regs, messages


def compile_object(nvcc, source, obj):
    """The kernel file alone into an object (its cubin is what cuobjdump reads): (ok, regs, messages)."""
    obj.parent.mkdir(parents=True, exist_ok=True)
    return nvcc_run([nvcc, *NVCC_FLAGS, "-Xptxas", "-v", f"-I{ROOT}", "-c", str(source), "-o", str(obj)])


def cached(stamp, key):
    return stamp.is_file() and stamp.read_text() == key


def link_driver(nvcc, obj, build):
    """The driver run.cu (its object kept in `build`) linked with the kernel's object into an
    executable beside the object: the executable, or None and nvcc's messages."""
    run_obj, stamp = build / "run.o", build / "run.o.stamp"
    key = hashlib.sha256(((HERE / "run.cu").read_text() + (HERE / "lab13.hpp").read_text() + nvcc +
                          " ".join(NVCC_FLAGS)).encode()).hexdigest()
    if not (run_obj.is_file() and cached(stamp, key)):
        ok, _, messages = nvcc_run([nvcc, *NVCC_FLAGS, f"-I{ROOT}", "-c", str(HERE / "run.cu"), "-o", str(run_obj)])
        if not ok:
            return None, messages
        stamp.write_text(key)
    exe = obj.with_suffix("")
    ok, _, messages = nvcc_run([nvcc, *NVCC_FLAGS[2:4], str(obj), str(run_obj), "-o", str(exe)])
    return (exe, "") if ok else (None, messages)


# ---- 2. the address, on the CPU ----------------------------------------------------------------
HOST_PRELUDE = """
// Lab 13's address check, on the CPU (written by check.py): the file up to the end of the
// region, compiled for the host, and aligned_storage called for every 16-byte-aligned base.
#undef __device__
#define __device__
#undef __forceinline__
#define __forceinline__ inline
"""
HOST_MAIN = """
}  // namespace
}  // namespace lab13

#include <cstdint>
#include <cstdio>

int main() {
  alignas(4096) static unsigned char buffer[4096 + sizeof(lab13::Storage) + 2048];
  for (int offset = 0; offset < %(align)d; offset += 16) {
    unsigned char* raw = buffer + 4096 + offset;
    const auto at = reinterpret_cast<unsigned char*>(&lab13::aligned_storage(raw));
    const long long pad = static_cast<long long>(at - raw);
    const bool right = reinterpret_cast<std::uintptr_t>(at) %% %(align)d == 0 && pad >= 0 && pad < %(align)d;
    if (!right) {
      std::printf("a base at %%d mod %(align)d: Storage at raw %%+lld, not raw %%+d\\n", offset, pad,
                  (%(align)d - offset) %% %(align)d);
      return 1;
    }
  }
  std::printf("every base 0, 16, ..., %(last)d mod %(align)d: Storage at the next multiple of %(align)d\\n");
  return 0;
}
"""


def check_address(nvcc, source, build):
    """(True, what was checked), (False, why not right), or (None, why it could not run)."""
    lines = source.read_text().splitlines()
    end = next(i for i, ln in enumerate(lines) if END in ln)
    last_include = max((i for i, ln in enumerate(lines[:end]) if re.match(r"\s*#\s*include", ln)), default=-1)
    text = "\n".join(lines[: last_include + 1]) + HOST_PRELUDE + "\n".join(lines[last_include + 1: end + 1])
    text += HOST_MAIN % {"align": ALIGN, "last": ALIGN - 16}
    test = build / "address_check.cpp"
    test.write_text(text)
    exe = build / "address_check"
    r = subprocess.run([nvcc, "-std=c++20", f"-I{ROOT}", "-x", "c++", str(test), "-o", str(exe)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        first = next((ln.strip() for ln in (r.stdout + r.stderr).splitlines() if "error" in ln), "")
        return None, ("not checked on the CPU: aligned_storage does not compile for the host (device-only code?"
                      + (f" {first[:160]}" if first else "") + "); with a GPU, part 4 checks the address")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    said = (r.stdout + r.stderr).strip()
    return (r.returncode == 0), said


# ---- 3. the SASS ------------------------------------------------------------------------------
def opcode(ins):
    """The instruction's opcode with its modifiers, without the predicate: 'LD.E.64', '@!P0 STS' -> 'STS'."""
    return re.sub(r"^@!?U?P[0-9T]\s+", "", ins.strip()).split()[0]


def access_counts(cuobjdump, nvdisasm, obj, sass_file):
    """({'LD.E.64': 32, ...} of the generic accesses, {...} of the shared ones) of the kernel, or a
    string saying what went wrong."""
    env = dict(os.environ, PATH=str(pathlib.Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return f"cuobjdump -sass failed: {r.stderr.strip()[:300]}"
    sass_file.write_text(r.stdout)
    kernels = {n: b for n, b in wait_placement.functions(r.stdout).items() if KERNEL_NAME in n}
    if len(kernels) != 1:
        return f"expected one {KERNEL_NAME} in the SASS of {obj.name}, found {len(kernels)}"
    (_, body), = kernels.items()
    generic, shared = collections.Counter(), collections.Counter()
    for ins in body:
        op = opcode(ins)
        base = op.split(".")[0]
        if base in ("LD", "ST"):  # exactly LD and ST: not LDG/STG (global), LDS/STS, LDC, LDSM ...
            generic[op] += 1
        elif base in ("LDS", "STS"):
            shared[op] += 1
    return generic, shared


def summary(counts):
    n = sum(counts.values())
    kinds = ", ".join(f"{op} x{k}" for op, k in sorted(counts.items()))
    return f"{n}" + (f" ({kinds})" if kinds else "")


# ---- the verdict ------------------------------------------------------------------------------
def verdict(lines, failures, note=None, code=PASS):
    """Prints the figures and the verdict; returns the exit code. `note` replaces PASS when a part
    did not run (`code` then says whether that is a pass, --cpu, or a skip, 77)."""
    print()
    for ln in lines:  # the figures, right above the verdict (round.sh keeps them from there)
        print(ln)
    if failures:
        print(f"{LAB}: FAIL ({len(failures)} check{'s' if len(failures) != 1 else ''} failed)")
        for f in failures:
            print(f"  - {f}")
        return FAIL
    print(f"{LAB}: {note or 'PASS'}")
    return code if note else PASS


def build_starter(nvcc, reference, build):
    """The starter's kernel rebuilt from the reference, compiled into `build` (kept while its text,
    nvcc and the flags stay the same): (object, None) or (None, nvcc's messages)."""
    build.mkdir(parents=True, exist_ok=True)
    text = starter_text(reference)
    source, obj, stamp = build / KERNEL_FILE, build / "starter.o", build / "starter.o.stamp"
    key = hashlib.sha256((text + nvcc + " ".join(NVCC_FLAGS)).encode()).hexdigest()
    if obj.is_file() and cached(stamp, key):
        return obj, None
    source.write_text(text)
    ok, _, messages = compile_object(nvcc, source, obj)
    if not ok:
        return None, messages
    stamp.write_text(key)
    return obj, None


def run_driver(exe, dump):
    try:
        r = subprocess.run([str(exe), str(dump)], capture_output=True, text=True, timeout=120)
        return r.returncode, (r.stdout + r.stderr).rstrip()
    except subprocess.TimeoutExpired:
        return FAIL, "the kernel did not finish in 120 s"


def first_difference(a, b):
    """Where two dumps (8192 floats of ds, then the total) differ first, in words."""
    n = min(len(a), len(b)) // 4
    x, y = struct.unpack(f"<{n}f", a[: 4 * n]), struct.unpack(f"<{n}f", b[: 4 * n])
    differ = [i for i in range(n) if a[4 * i: 4 * i + 4] != b[4 * i: 4 * i + 4]]
    if not differ:
        return f"{len(a)} bytes against {len(b)}"
    i = differ[0]
    where = "the total" if i == n - 1 else f"ds[{i // 128}][{i % 128}]"
    return f"{len(differ)} of {n} values differ; the first, {where}: yours {x[i]!r}, the starter's {y[i]!r}"


def run(args):
    source = pathlib.Path(args.file).resolve() if args.file else HERE / ("solution" if args.solution else "") / KERNEL_FILE
    starter, solution = HERE / KERNEL_FILE, HERE / "solution" / KERNEL_FILE
    reference = starter if source == solution else solution
    build = (pathlib.Path(args.build) if args.build else
             ROOT / "build" / ("labs-L13-solution" if args.solution else "labs-L13")).resolve()
    starter_build = pathlib.Path(args.starter_build).resolve() if args.starter_build else build / "starter"
    print(f"== {LAB}: shared memory by name ({shown(source)})")
    lines, failures = [], []
    if not source.is_file():
        print(f"error: no file {source}", file=sys.stderr)
        return USAGE

    # 1. The region.
    why = check_region(source, reference)
    if why:
        failures.append(why)
        return verdict(lines, failures)
    lines.append("  outside the marked region: the reference's, line for line")

    nvcc = find_nvcc(args.nvcc)
    if not nvcc:
        return verdict(lines, failures, "SKIPPED (no nvcc: put the CUDA toolkit's bin on PATH, or pass --nvcc)", SKIP)
    build.mkdir(parents=True, exist_ok=True)

    # 2. The address, on the CPU.
    right, said = check_address(nvcc, source, build)
    if right is None:
        lines.append(f"  the address: {said}")
    elif right:
        lines.append(f"  the address (CPU): {said}")
    else:
        failures.append(f"aligned_storage(raw) is not raw rounded up to the next multiple of {ALIGN} bytes: {said}. "
                        "The Storage must stay where the starter put it (its tiles need the 1024-byte alignment)")

    # 3. The compile and the SASS, yours and the starter's.
    obj = build / "yours.o"
    ok, regs, messages = compile_object(nvcc, source, obj)
    if not ok:
        print(messages)
        print(f"error: {source.name} did not compile: the compiler's messages are above", file=sys.stderr)
        return USAGE
    lines.append(f"  compiled for sm_90a ({nvcc}){': ' + regs if regs else ''}")
    is_starter = source.read_text() == starter_text(solution)
    start_obj, messages = build_starter(nvcc, solution, starter_build)
    if start_obj is None:
        print(messages)
        print("error: the starter's kernel (rebuilt from the reference) did not compile", file=sys.stderr)
        return USAGE

    cuobjdump = find_tool("cuobjdump", args.cuobjdump, nvcc)
    nvdisasm = find_tool("nvdisasm", args.nvdisasm, nvcc)
    sass_skipped = None
    if cuobjdump and nvdisasm:
        sass = build / "shared_by_name.sass"
        theirs = access_counts(cuobjdump, nvdisasm, start_obj, starter_build / "starter.sass")
        mine = access_counts(cuobjdump, nvdisasm, obj, sass)
        for got in (theirs, mine):
            if isinstance(got, str):
                failures.append(got)
                return verdict(lines, failures)
        expected = sum(theirs[0].values()) + sum(theirs[1].values())
        lines.append(f"  shared-memory accesses in the SASS of {KERNEL_NAME} (generic: LD/ST; shared: LDS/STS):")
        lines.append(f"    the starter: generic {summary(theirs[0])}; shared {summary(theirs[1])}")
        lines.append(f"    {'yours (the starter)' if is_starter else 'yours'}: generic {summary(mine[0])}; "
                     f"shared {summary(mine[1])}")
        lines.append(f"  (the whole SASS: {shown(sass)}; the starter's: {shown(starter_build / 'starter.sass')})")
        n_generic, n_shared = sum(mine[0].values()), sum(mine[1].values())
        if n_generic:
            failures.append(f"{n_generic} generic loads and stores (LD/ST) are left in {KERNEL_NAME}: the compiler "
                            "cannot prove that the Storage is in shared memory, so every access through it tests "
                            "its 64-bit address at run time. Where did the pointer lose its address space?")
        elif n_shared < expected:
            failures.append(f"only {n_shared} LDS/STS, where the starter's kernel makes {expected} shared-memory "
                            f"accesses ({sum(theirs[0].values())} generic, {sum(theirs[1].values())} LDS/STS): "
                            "each should have become an LDS/STS, and none disappear")
    else:
        missing = " and ".join(t for t, p in (("cuobjdump", cuobjdump), ("nvdisasm", nvdisasm)) if not p)
        sass_skipped = (f"SKIPPED: no {missing} (cuobjdump -sass runs nvdisasm), so the SASS was not read. Both are "
                        "in the CUDA toolkit's bin; scripts/install-deps.sh fetches them into .deps/ from PyPI; or "
                        "pass --cuobjdump/--nvdisasm PATH, or set CUOBJDUMP/NVDISASM")
    if failures:
        return verdict(lines, failures)
    if args.cpu:
        if sass_skipped:
            return verdict(lines, failures, sass_skipped, SKIP)
        return verdict(lines, failures, "CPU parts PASS (--cpu: the kernel was compiled, not run)", PASS)

    # 4. The kernel on the GPU, yours and then the starter's, on the same inputs.
    exe, messages = link_driver(nvcc, obj, build)
    start_exe, start_messages = link_driver(nvcc, start_obj, build)  # the driver's object is shared
    if exe is None or start_exe is None:
        print(messages or start_messages)
        print("error: the driver run.cu did not build: nvcc's messages are above", file=sys.stderr)
        return USAGE
    rc, out = run_driver(exe, build / "yours.bin")
    lines += ["  " + ln for ln in out.splitlines()]
    if rc == SKIP:
        return verdict(lines, failures, sass_skipped or (
            "NOT CHECKED ON A GPU. Your kernel compiled and the SASS check passed; the kernel itself has not been run."),
            SKIP)
    if rc != 0:
        failures.append(f"your kernel's outputs (driver exit {rc}): " + (out.splitlines()[-1] if out else "no output"))
        return verdict(lines, failures)
    start_rc, start_out = run_driver(start_exe, starter_build / "starter.bin")
    if start_rc != 0:
        failures.append(f"the starter's kernel did not run right (driver exit {start_rc}), so yours could not be "
                        "compared with it: " + (start_out.splitlines()[-1] if start_out else "no output"))
        return verdict(lines, failures)
    a, b = (build / "yours.bin").read_bytes(), (starter_build / "starter.bin").read_bytes()
    if a != b:
        failures.append("your outputs are not the starter's bit for bit: " + first_difference(a, b) +
                        " (the fix changes the instructions that move the data, never the arithmetic)")
        return verdict(lines, failures)
    lines.append("  against the starter's kernel: ds and the total bit for bit the same")
    return verdict(lines, failures, sass_skipped, SKIP)


# ---- the checker's own test --------------------------------------------------------------------
def selftest(args):
    """Known-bad kernel files must fail with the right diagnosis; the reference and other right
    answers must pass."""
    reference = (HERE / "solution" / KERNEL_FILE).read_text()
    head, _, tail = split_region(reference, KERNEL_FILE)
    signature = "__device__ __forceinline__ Storage& aligned_storage(unsigned char* raw) {"
    rounded = ("  const std::uintptr_t base = (reinterpret_cast<std::uintptr_t>(raw) + kAlign - 1) & "
               "~std::uintptr_t(kAlign - 1);")

    def body(*statements):
        return "\n".join(head + [signature, *statements, "}"] + tail) + "\n"

    bad = 0
    starter = (HERE / KERNEL_FILE).read_text()
    if starter_text(HERE / "solution" / KERNEL_FILE) != starter:
        print(f"  FAIL the checker's copy of the starter's region is {KERNEL_FILE}'s (STARTER_REGION in check.py)")
        bad += 1
    else:
        print("  ok   the checker's copy of the starter's region is the starter's")
    generic = r"\d+ generic loads and stores \(LD/ST\) are left"
    cases = [
        ("the reference", reference, PASS, r"^L13: CPU parts PASS"),
        ("the starter (the integer round trip)", starter, FAIL, generic),
        ("the integer round trip through cvta (shared to generic)",
         body(rounded, "  return *static_cast<Storage*>(__cvta_shared_to_generic(__cvta_generic_to_shared("
                       "reinterpret_cast<void*>(base))));"), FAIL, generic),
        ("the integer round trip with __builtin_assume(__isShared(p))",
         body(rounded, "  Storage* const p = reinterpret_cast<Storage*>(base);", "  __builtin_assume(__isShared(p));",
              "  return *p;"), FAIL, generic),
        ("the integer round trip with __builtin_assume_aligned",
         body(rounded, "  return *static_cast<Storage*>(__builtin_assume_aligned(reinterpret_cast<void*>(base), kAlign));"),
         FAIL, generic),
        ("the rounding dropped (raw itself)", body("  return *reinterpret_cast<Storage*>(raw);"),
         FAIL, r"is not raw rounded up to the next multiple of 1024 bytes: a base at 16 mod 1024"),
        ("the padding wrong by a chunk (raw + 1024 - offset, never + 0)",
         body("  const std::size_t pad = kAlign - (reinterpret_cast<std::uintptr_t>(raw) & (kAlign - 1));",
              "  return *reinterpret_cast<Storage*>(raw + pad);"),
         FAIL, r"a base at 0 mod 1024: Storage at raw \+1024, not raw \+0"),
        ("a named __shared__ Storage", body("  __shared__ Storage named;", "  return named;"),
         FAIL, r"declares a __shared__ variable"),
        ("chapter 36's helper called", body("  return ladder::hopper::aligned_smem_shared<Storage>(raw);"),
         FAIL, r"calls aligned_smem_shared, chapter 36's helper"),
        ("another right answer: the integer rounding, then raw + (base - raw)",
         body(rounded, "  return *reinterpret_cast<Storage*>(raw + (base - reinterpret_cast<std::uintptr_t>(raw)));"),
         PASS, r"^L13: CPU parts PASS"),
        ("another right answer, device-only: the padding from the shared-window address",
         body("  const unsigned offset = unsigned(__cvta_generic_to_shared(raw)) & (kAlign - 1);",
              "  return *reinterpret_cast<Storage*>(raw + ((kAlign - offset) & (kAlign - 1)));"),
         PASS, r"the address: not checked on the CPU(.|\n)*^L13: CPU parts PASS"),
        ("a line outside the region changed", reference.replace("-l.x));", "l.x));"),
         FAIL, r"is after the marked region and differs"),
        ("a marker removed", reference.replace(END, "// the end"), FAIL, r"must each appear once"),
    ]
    return lab_selftest.run_cases(pathlib.Path(__file__).resolve(), KERNEL_FILE, cases, args, "lab13-selftest-",
                                  lambda tmp: ["--starter-build", str(pathlib.Path(tmp) / "starter")])


def main(argv):
    ap = argparse.ArgumentParser(description="Lab 13's checker: shared memory by name")
    ap.add_argument("--solution", action="store_true", help="check the reference in solution/")
    ap.add_argument("--file", help="check this copy of shared_by_name.cu")
    ap.add_argument("--cpu", action="store_true", help="the region, the address and the SASS only")
    ap.add_argument("--no-time", action="store_true", help="accepted; this lab times nothing")
    ap.add_argument("--nvcc")
    ap.add_argument("--cuobjdump")
    ap.add_argument("--nvdisasm")
    ap.add_argument("--build", help="where the objects, the executables and the SASS go")
    ap.add_argument("--starter-build", help="where the starter's object and SASS are kept")
    ap.add_argument("--selftest", action="store_true", help="the checker's own test")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return PASS if e.code == 0 else USAGE
    return selftest(args) if args.selftest else run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
