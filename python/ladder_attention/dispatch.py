"""The dispatch table, in one place: for each kind of problem, the variants of libladder_capi.so
to try, best first (the measured order of the ladder's chapters on the H200: docs/README.md's
chapter table). The first one that serves the problem runs; `variant=` (`backward_variant=`) names
one instead. Each row says what the package can know without calling the library -- the compute
capabilities it runs on, its element types, its head dimensions, whether it writes the log-sum-exp
-- and the library has the last word: a row it refuses for this shape ("does not run ...": a
B·H limit, a decode row count, a varlen plan) is skipped and its reason kept for the error raised
when every row refuses.

Problems (`kind_of` in checks.py):
  dense   [B, H, N, D], as many keys as queries, H K/V heads
  gqa     the same with Hkv < H K/V heads
  varlen  a packed batch [total, H, D] (cu_seqlens), keys = queries in every sequence
  decode  [B, H, Nq, D] against Nkv != Nq keys (Nq <= 16), causal aligned to the end;
          decode16 when the packed rows of a K/V head (Nq x H/Hkv) are at most 16, decode_wide beyond
  paged   decode through a block table, K/V pools [pages, Hkv, page, D]

Not every forward writes the log-sum-exp the backward needs: of the Hopper prefill steps only the
ones the tables put first (33, 34, 26, 27) and step 35 do (their epilogues write it when asked),
not 16-22, 31 or 32. So a forward whose result needs a gradient runs the best row with lse=True,
and one under torch.no_grad() the best row of all (on the H200 the same kernel). Rows with peer=True are
the libraries the ladder is measured against (cuDNN), last in each list: they run where no step of
the ladder serves the problem."""
import collections

Row = collections.namedtuple("Row", "id sm dtypes dims lse peer")
HOPPER = (90, 90)  # sm_90a kernels: compute capability 9.0 only
AMPERE_UP = (80, None)  # mma.sync kernels: 8.0 and newer
BOTH = ("fp16", "bf16")
D64, ANY_D = (64,), (64, 128)


def row(vid, sm, dtypes=BOTH, dims=ANY_D, lse=False, peer=False):
    return Row(vid, sm, dtypes, dims, lse, peer)


CUDNN = row("99/cudnn", AMPERE_UP, peer=True)
CUDNN_LSE = row("99/cudnn_lse", AMPERE_UP, lse=True, peer=True)

FORWARD = {
    "dense": [row("34/three_iterators", HOPPER, dims=D64, lse=True),  # D = 64 top (22's tile, 33's descriptors)
              row("33/iterators", HOPPER, lse=True),                   # D = 128 top
              row("21/snake", HOPPER),
              row("06/h200", AMPERE_UP, dtypes=("fp16",), lse=True),
              CUDNN, CUDNN_LSE],
    "gqa": [row("26/group_order", HOPPER, lse=True), CUDNN, CUDNN_LSE],
    "varlen": [row("27/longest_first", HOPPER, lse=True), CUDNN, CUDNN_LSE],
    "decode16": [row("42/cta_merge", AMPERE_UP, lse=True), row("44/row_tiles", AMPERE_UP, lse=True),
                 row("28/split_kv", AMPERE_UP, lse=True), CUDNN],
    "decode_wide": [row("44/row_tiles", AMPERE_UP, lse=True), row("42/cta_merge", AMPERE_UP, lse=True), CUDNN],
    "paged": [row("43/cta_merge", AMPERE_UP, lse=True), row("29/split_kv", AMPERE_UP, lse=True), CUDNN],
}

# The backward (self-attention only: dense, gqa, varlen). "deterministic": reruns bit-identical.
BACKWARD = {
    "dense": [row("40/atomic", HOPPER), row("36/shared_space", HOPPER), row("24/atomic", AMPERE_UP),
              row("98/cudnn", AMPERE_UP, peer=True)],
    "gqa": [row("37/group_in_cta", HOPPER)],
    "varlen": [row("38/packed", HOPPER)],
}
DETERMINISTIC_BACKWARD = {
    "dense": [row("40/ordered", HOPPER), row("39/ordered", HOPPER), row("24/deterministic", AMPERE_UP)],
}

# Every forward variant that writes the log-sum-exp (Variant::with_lse in steps/), for a named one.
WRITES_LSE = {"06/lse", "06/bc128", "06/bc128_s64", "06/h200", "06/d128_lean", "06/d128_s64_unroll2",
              "06/d128_s64", "26/group_order", "26/head_major", "27/longest_first", "27/in_order",
              "28/one_cta_per_head", "28/split_kv", "29/split_kv", "33/iterators", "34/three_iterators",
              "35/lazy_top", "41/last_cta_merge", "42/cta_merge", "43/cta_merge", "44/row_tiles",
              "99/cudnn_lse"}


def _fits(r, sm, dtype, head_dim, need_lse):
    lo, hi = r.sm
    return (sm >= lo and (hi is None or sm <= hi) and dtype in r.dtypes and head_dim in r.dims
            and (r.lse or not need_lse))


def check_named(named, need_lse):
    """A ValueError if a named forward variant cannot give the log-sum-exp that is needed."""
    if named and need_lse and named not in WRITES_LSE:
        raise ValueError(
            "variant %s writes no log-sum-exp, which the backward (or return_lse) needs: run it under "
            "torch.no_grad() (or on inputs that need no gradient), or name one that writes it: %s"
            % (named, ", ".join(sorted(WRITES_LSE))))


def forward_candidates(kind, sm, dtype, head_dim, need_lse, named=""):
    """The forward variant ids to try for a problem, best first. `sm` is 10 x major + minor,
    `dtype` "fp16" or "bf16"; need_lse keeps only rows that write the log-sum-exp. A named variant
    is the only candidate (a ValueError if need_lse and it writes none)."""
    if named:
        check_named(named, need_lse)
        return [named]
    return [r.id for r in FORWARD[kind] if _fits(r, sm, dtype, head_dim, need_lse)]


def backward_candidates(kind, sm, dtype, head_dim, named=""):
    """The backward variant ids to try, best first: `named` may be an id, "" (the fastest) or
    "deterministic" (rows whose reruns are bit-identical)."""
    if named and named != "deterministic":
        return [named]
    table = DETERMINISTIC_BACKWARD if named == "deterministic" else BACKWARD
    return [r.id for r in table.get(kind, []) if _fits(r, sm, dtype, head_dim, False)]


def all_ids():
    """Every variant id the tables name (a test checks each against `ladder --list`)."""
    tables = list(FORWARD.values()) + list(BACKWARD.values()) + list(DETERMINISTIC_BACKWARD.values())
    return sorted({r.id for rows in tables for r in rows} | WRITES_LSE)


def is_refusal(message):
    """Whether a library error means "this variant does not serve this problem" (try the next row)
    rather than a failure (a CUDA error, a bad argument: raised at once)."""
    return (" does not run " in message or "cuDNN has no engine" in message
            or message.startswith(("no attention variant", "no backward variant")))
