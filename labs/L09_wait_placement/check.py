#!/usr/bin/env python3
"""Lab 09's checker (given, do not edit): where did ptxas put the wait?

  labs/check.sh L09 [--solution] [--cpu]     (or run this file directly)

  1. your file, outside the marked region, is the reference's, line for line, and the region does
     not call hopper::keep_above_wait (chapter 31's helper, the answer: write the store yourself);
  2. it compiles for sm_90a with the project's flags (nvcc), together with the driver run.cu;
  3. the SASS (cuobjdump): the kernel still has its 12 HGMMA and all 64 MUFU.EX2, and how many of
     those exponentials run between the last HGMMA issue and WARPGROUP.DEPBAR.LE gsb0, 0x0, the
     wait for O = P·V. Pass: all 64 (the work runs under the product in flight);
  4. with an H100/H200: the kernel runs, and o and l are compared with an fp64 CPU reference.

Parts 1-3 need no GPU. Exit: 0 every check passed; 1 a check failed (the lines say which and why);
2 bad usage or your file did not compile; 77 what could run passed, but part 4 found no GPU (with
--cpu, exit 0 then), or no cuobjdump/nvdisasm was found for part 3 (skipped).

Options: --solution (the reference in solution/), --file PATH (another copy of the kernel file),
--cpu (parts 1-3 only), --nvcc PATH, --cuobjdump PATH, --nvdisasm PATH (or $CUOBJDUMP,
$NVDISASM), --build DIR (where the executable and the SASS go; default build/labs-L09[-solution]),
--no-time (accepted: this lab times nothing), --selftest (the checker's own test: known-bad files
must fail with the right diagnosis).
"""
import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import wait_placement  # noqa: E402  the SASS parser chapter 31 uses (functions, event, compress)
import lab_selftest  # noqa: E402  the script-checker labs' selftest loop

LAB = "L09"
KERNEL_FILE = "overlap.cu"
KERNEL_NAME = "overlap_kernel"
BEGIN = "// ==== L09: your edit begins"
END = "// ==== L09: your edit ends"
HELPER = "keep_above_wait"  # chapter 31's pin, in wgmma.cuh: the answer, so not allowed in the region
# What the kernel is (lab09.hpp): S = Q Kᵀ in D/16 = 4 k16 steps (SS), O = P V in
# kBlockN/16 = 8 (RS); kBlockN/2 = 64 scores per thread, one exponential each.
EXPECTED_HGMMA = 4 + 8
EXPECTED_EXP = 64
# The project's flags for sm_90a code (CMakePresets.json's h200 preset, what CMake passes).
NVCC_FLAGS = ["-O3", "-DNDEBUG", "--generate-code=arch=compute_90a,code=[sm_90a]", "-std=c++20",
              "--expt-relaxed-constexpr"]
PASS, FAIL, USAGE, SKIP = 0, 1, 2, 77


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


def check_region(path, reference):
    """None if `path` equals `reference` outside the region, else why not."""
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
        if HELPER in ln.split("//")[0]:
            return (f"{path.name}:{len(mine[0]) + i + 1} calls hopper::{HELPER}, chapter 31's helper: it is this lab's "
                    "answer, so the lab asks you to write that store yourself (inline PTX in the region)")
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


def compile_kernel(nvcc, source, build):
    """Builds the driver with `source`; (executable, ptxas's register line) or (None, messages)."""
    build.mkdir(parents=True, exist_ok=True)
    exe = build / "lab_L09_run"
    cmd = [nvcc, *NVCC_FLAGS, "-Xptxas", "-v", f"-I{ROOT}", str(source), str(HERE / "run.cu"), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        noise = re.compile(r"^ptxas info|^\s+\d+ bytes stack frame")
        return None, "\n".join(ln for ln in out.splitlines() if not noise.match(ln)) + "\n  (command: " + " ".join(cmd) + ")"
    regs = ""
    m = re.search(r"Compiling entry function '(\S*" + KERNEL_NAME + r"\S*)'.*?(\d+) bytes spill stores.*?Used (\d+) registers",
                  out, re.S)
    if m:
        regs = f"{m.group(3)} registers, {m.group(2)} bytes spilled"
    return exe, regs


# ---- 3. the SASS ------------------------------------------------------------------------------
def analyse(body):
    """The events of one kernel (wait_placement's legend) and the figures: the compressed order, the
    HGMMA and MUFU.EX2 counts, and the exponentials between the last HGMMA issue and the first
    W0 after it (under the product) and after that W0; under is None without such a W0."""
    events = [e for e in (wait_placement.event(x) for x in body) if e]
    res = {"order": wait_placement.compress(events),
           "hgmma": sum(e in ("G", "G|") for e in events),
           "exp": events.count("e"),
           "under": None, "after": None}
    last_issue = max((i for i, e in enumerate(events) if e in ("G", "G|")), default=None)
    if last_issue is None:
        return res
    w0 = next((i for i in range(last_issue, len(events)) if events[i] == "W0"), None)
    if w0 is None:
        return res
    res["under"] = events[last_issue:w0].count("e")
    res["after"] = events[w0:].count("e")
    return res


def check_sass(cuobjdump, nvdisasm, exe, build, lines, failures):
    env = dict(os.environ, PATH=str(pathlib.Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([cuobjdump, "-sass", str(exe)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        failures.append(f"cuobjdump -sass failed: {r.stderr.strip()[:300]}")
        return
    (build / "overlap.sass").write_text(r.stdout)
    kernels = {n: b for n, b in wait_placement.functions(r.stdout).items() if KERNEL_NAME in n}
    if len(kernels) != 1:
        failures.append(f"expected one {KERNEL_NAME} in the SASS, found {len(kernels)}")
        return
    (_, body), = kernels.items()
    a = analyse(body)
    lines.append(f"  SASS of {KERNEL_NAME} (G: HGMMA, A: WARPGROUP.ARRIVE, W1/W0: WARPGROUP.DEPBAR.LE gsb0, 0x1/0x0, "
                 "e: MUFU.EX2, B: a branch):")
    lines.append(f"    {a['order']}")
    sass = (build / "overlap.sass").resolve()
    lines.append(f"  (the whole SASS: {sass.relative_to(ROOT) if sass.is_relative_to(ROOT) else sass})")
    if a["hgmma"] != EXPECTED_HGMMA:
        failures.append(f"the kernel issues {a['hgmma']} HGMMA, not {EXPECTED_HGMMA} (4 for S, 8 for P·V): "
                        "the products are outside the region and must stay as they are")
    if a["exp"] != EXPECTED_EXP:
        failures.append(f"the kernel has {a['exp']} MUFU.EX2, not {EXPECTED_EXP}: every exponential of the block "
                        "must stay (each feeds a row sum, and l is an output), and none may be added")
    if a["under"] is None:
        failures.append("no WARPGROUP.DEPBAR.LE gsb0, 0x0 after the last HGMMA: the wait for P·V is missing")
        return
    lines.append(f"  exponentials under the product (between the last HGMMA issue and WARPGROUP.DEPBAR.LE gsb0, 0x0): "
                 f"{a['under']} of {a['exp']}; after the wait: {a['after']}")
    if a["exp"] == EXPECTED_EXP and a["under"] != EXPECTED_EXP:
        failures.append(f"only {a['under']} of the {EXPECTED_EXP} exponentials run under the product: ptxas put "
                        f"WARPGROUP.DEPBAR.LE gsb0, 0x0 above the other {EXPECTED_EXP - a['under']}, so they wait "
                        "for P·V to finish")


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


def run(args):
    source = pathlib.Path(args.file).resolve() if args.file else HERE / ("solution" if args.solution else "") / KERNEL_FILE
    starter, solution = HERE / KERNEL_FILE, HERE / "solution" / KERNEL_FILE
    reference = starter if source == solution else solution
    build = pathlib.Path(args.build) if args.build else ROOT / "build" / ("labs-L09-solution" if args.solution else "labs-L09")
    print(f"== {LAB}: where did ptxas put the wait? ({source.relative_to(ROOT) if source.is_relative_to(ROOT) else source})")
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

    # 2. The compile.
    nvcc = find_nvcc(args.nvcc)
    if not nvcc:
        return verdict(lines, failures, "SKIPPED (no nvcc: put the CUDA toolkit's bin on PATH, or pass --nvcc)", SKIP)
    exe, regs = compile_kernel(nvcc, source, build)
    if exe is None:
        print(regs)
        print(f"error: {source.name} did not compile: the compiler's messages are above", file=sys.stderr)
        return USAGE
    lines.append(f"  compiled for sm_90a ({nvcc}){': ' + regs if regs else ''}")

    # 3. The SASS.
    cuobjdump = find_tool("cuobjdump", args.cuobjdump, nvcc)
    nvdisasm = find_tool("nvdisasm", args.nvdisasm, nvcc)
    sass_skipped = None
    if cuobjdump and nvdisasm:
        check_sass(cuobjdump, nvdisasm, exe, build, lines, failures)
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

    # 4. The kernel on the GPU.
    try:
        r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
        out, rc = (r.stdout + r.stderr).rstrip(), r.returncode
    except subprocess.TimeoutExpired:
        out, rc = "the kernel did not finish in 120 s", FAIL
    lines += ["  " + ln for ln in out.splitlines()]
    if rc == SKIP:
        return verdict(lines, failures, sass_skipped or (
            "NOT CHECKED ON A GPU. Your kernel compiled and the SASS check passed; the kernel itself has not been run."),
            SKIP)
    if rc != 0:
        failures.append(f"the kernel's outputs (driver exit {rc}): " + (out.splitlines()[-1] if out else "no output"))
        return verdict(lines, failures)
    return verdict(lines, failures, sass_skipped, SKIP)


# ---- the checker's own test --------------------------------------------------------------------
def selftest(args):
    """Known-bad kernel files must fail with the right diagnosis, the reference must pass."""
    starter = (HERE / KERNEL_FILE).read_text()
    head, region, tail = split_region(starter, KERNEL_FILE)
    work = [ln for ln in region if "exp2_approx" in ln or "pragma" in ln or ln.lstrip().startswith("for")]

    def store(values, space="shared", predicate="setp.gt.u32 never, lane, 31;"):
        """A never-executed store of `values` written in the region, as a learner would write it."""
        return ["  asm volatile(\"{\\n.reg .pred never;\\n.reg .u32 lane;\\nmov.u32 lane, %%laneid;\\n\"",
                f"               \"{predicate}\\n@never st.{space}.v2.f32 [%0], {{%1, %2}};\\n}}\\n\"",
                f"               :: \"{'l' if space == 'global' else 'r'}\"({'nowhere' if space == 'global' else '0u'}), "
                f"\"f\"({values[0]}), \"f\"({values[1]}) : \"memory\");"]

    def with_region(lines):
        return "\n".join(head + work + lines + tail)

    cases = [
        ("the reference", (HERE / "solution" / KERNEL_FILE).read_text(), PASS, r"^L09: CPU parts PASS"),
        ("the starter (an empty asm with a memory clobber)", starter, FAIL, r"only \d+ of the 64 exponentials run under"),
        ("fence_registers on the row sums", with_region(["  hopper::fence_registers(row_sum);"]),
         FAIL, r"only \d+ of the 64 exponentials run under"),
        ("chapter 31's helper called", with_region(["  hopper::keep_above_wait(row_sum[0], row_sum[1]);"]),
         FAIL, r"calls hopper::keep_above_wait, chapter 31's helper"),
        ("the work deleted", "\n".join(head + tail), FAIL, r"has 0 MUFU.EX2, not 64"),
        ("the learner's store, one row's sums only", with_region(store(("row_sum[0]", "row_sum[0]"))),
         FAIL, r"only \d+ of the 64 exponentials run under"),
        ("the learner's store, a constant predicate (ptxas deletes it)",
         with_region(store(("row_sum[0]", "row_sum[1]"), predicate="setp.ne.u32 never, 0, 0;")),
         FAIL, r"only \d+ of the 64 exponentials run under"),
        ("the learner's store, to global memory (pins nothing)",
         with_region(["  float* const nowhere = l;"] + store(("row_sum[0]", "row_sum[1]"), space="global")),
         FAIL, r"only \d+ of the 64 exponentials run under"),
        ("a line outside the region changed", starter.replace("hopper::wgmma_wait<1>();", "hopper::wgmma_wait<0>();"),
         FAIL, r"is before the marked region and differs"),
        ("a marker removed", starter.replace(END, "// the end"), FAIL, r"must each appear once"),
    ]
    cases = [(what, text + ("\n" if not text.endswith("\n") else ""), rc, want) for what, text, rc, want in cases]
    return lab_selftest.run_cases(pathlib.Path(__file__).resolve(), KERNEL_FILE, cases, args, "lab09-selftest-")


def main(argv):
    ap = argparse.ArgumentParser(description="Lab 09's checker: where did ptxas put the wait?")
    ap.add_argument("--solution", action="store_true", help="check the reference in solution/")
    ap.add_argument("--file", help="check this copy of overlap.cu")
    ap.add_argument("--cpu", action="store_true", help="the region, the compile and the SASS only")
    ap.add_argument("--no-time", action="store_true", help="accepted; this lab times nothing")
    ap.add_argument("--nvcc")
    ap.add_argument("--cuobjdump")
    ap.add_argument("--nvdisasm")
    ap.add_argument("--build", help="where the executable and the SASS go")
    ap.add_argument("--selftest", action="store_true", help="the checker's own test")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return PASS if e.code == 0 else USAGE
    return selftest(args) if args.selftest else run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
