"""scripts/peers.py --pass serve: Part VI's problems (decode, GQA, varlen, paged) against PyTorch's
backends, FlashAttention-4 and the ladder's serving variants, in GB/s beside a device copy (the
manual is peers.py's docstring)."""
import random
import sys

from peers_checks import OUTPUT_TOLERANCE, output_check
from peers_ladder import ladder_serving_call, row_name
from peers_timing import as_graph, time_rounds
from peers_torch import BACKENDS, sdpa_kernel, torch


# ---- --pass serve: Part VI's problems (GQA, decode, varlen, paged) -----------------------------
# PyTorch's FA2 and cuDNN backends and FlashAttention-4 by default.
SERVE_BACKENDS = ("sdpa-cudnn", "sdpa-flash", "fa4")


SERVE_GRIDS = ("decode", "gqa", "varlen", "paged", "decode-sizes")
SERVE_DEFAULT = SERVE_GRIDS[:4]  # --grid serve: Part VI's four; decode-sizes only when named


# The issue's four decode shapes, (B, Hq, Hkv, N_kv), D = 128, one query token.
DECODE_SHAPES = ((8, 32, 8, 32768), (64, 32, 8, 4096), (1, 64, 8, 131072), (128, 32, 32, 2048))
# --grid decode-sizes (issue 26's figure: GB/s against the K/V cache's size, where each kernel
# bends): three small batches, (B, Hq, Hkv), at caches from 1,024 to 131,072 keys, D = 128.
DECODE_SIZE_BATCHES = ((1, 64, 8), (3, 40, 8), (8, 32, 8))
DECODE_SIZE_KEYS = (1024, 2048, 4096, 8192, 12345, 16384, 32768, 65536, 131072)


PAGE_SIZES = (64, 256)


COPY_BYTES = 4 << 30  # the bandwidth ceiling's copy: 4 GiB read and 4 GiB written


def serve_shape(kind, batch, heads, kv_heads, seqlen, kv_seqlen, head_dim, causal, q_lens=None, page_size=0):
    """One problem of --pass serve: seqlen queries and kv_seqlen keys per sequence (varlen: q_lens,
    keys as many as queries, seqlen and kv_seqlen the longest), page_size 0 for contiguous K/V."""
    return {"kind": kind, "batch": batch, "heads": heads, "kv_heads": kv_heads, "seqlen": seqlen,
            "kv_seqlen": kv_seqlen, "head_dim": head_dim, "causal": causal, "q_lens": q_lens,
            "page_size": page_size}


def varlen_lengths(seed, count, longest):
    """count lengths drawn uniformly from 1..longest by a generator of its own (the same batch
    whatever else the run draws, and on every machine)."""
    rng = random.Random(seed)
    return [rng.randint(1, longest) for _ in range(count)]


def serve_shapes(quick, grid="serve", seed=0, varlen_count=16, varlen_max=8192, head_dim=128):
    """The shapes of --pass serve's grids (one of SERVE_GRIDS, or "serve": all), at head_dim (the
    grids' own is 128); quick keeps the first of each."""
    out = []
    for kind in (SERVE_DEFAULT if grid == "serve" else (grid,)):
        if kind == "decode":  # Nq = 1 sees every key: causal or not is the same problem
            group = [serve_shape("decode", b, h, hkv, 1, nk, head_dim, False) for b, h, hkv, nk in DECODE_SHAPES]
        elif kind == "decode-sizes":
            group = [serve_shape("decode", b, h, hkv, 1, nk, head_dim, False)
                     for b, h, hkv in DECODE_SIZE_BATCHES for nk in DECODE_SIZE_KEYS]
        elif kind == "gqa":
            group = [serve_shape("gqa", 4, 32, 8, n, n, head_dim, c) for c in (False, True) for n in (4096, 8192)]
        elif kind == "varlen":
            lens = varlen_lengths(seed, varlen_count, varlen_max)
            group = [serve_shape("varlen", len(lens), h, hkv, max(lens), max(lens), head_dim, c, lens)
                     for h, hkv in ((32, 8), (16, 16)) for c in (False, True)]
        else:
            group = [serve_shape("paged", b, h, hkv, 1, nk, head_dim, False, page_size=p)
                     for p in PAGE_SIZES for b, h, hkv, nk in DECODE_SHAPES]
        out += group[:1] if quick else group
    return out


def sequence_lengths(s):
    """[(queries, keys)] of each sequence."""
    if s["q_lens"]:
        return [(n, n) for n in s["q_lens"]]
    return [(s["seqlen"], s["kv_seqlen"])] * s["batch"]


def serve_flops(s):
    """common/problem.hpp's count: 4·H·D per (query, key) pair that exists; a causal sequence with
    as many queries as keys counts half (the papers' convention), a decode one its exact pairs."""
    pairs = 0.0
    for nq, nk in sequence_lengths(s):
        if not s["causal"]:
            pairs += nq * nk
        elif nq == nk:
            pairs += nq * nk / 2.0
        else:
            pairs += nq * (nk - nq) + nq * (nq + 1) / 2.0
    return 4.0 * s["heads"] * pairs * s["head_dim"]


def serve_bytes(s, element_bytes=2):
    """Q, K, V read and O written once (common/problem.hpp's min_bytes): K/V the keys in use."""
    total_q = sum(nq for nq, _ in sequence_lengths(s))
    total_k = sum(nk for _, nk in sequence_lengths(s))
    return (2 * total_q * s["heads"] + 2 * total_k * s["kv_heads"]) * s["head_dim"] * element_bytes


def describe(s, dtype_name):
    what = f"{s['kind']} "
    if s["q_lens"]:
        what += f"varlen({s['batch']} seqs, {sum(s['q_lens'])} tokens, longest {s['seqlen']})"
    else:
        what += f"B={s['batch']} Nq={s['seqlen']} Nk={s['kv_seqlen']}"
    what += f" H={s['heads']} Hkv={s['kv_heads']} D={s['head_dim']} {'causal' if s['causal'] else 'non-causal'}"
    return what + (f" page={s['page_size']}" if s["page_size"] else "") + f" {dtype_name}"


def sampled_rows(n, edge=32, inner=64):
    """The query rows whose output is checked, as the harness samples them: all of a short sequence,
    else the first and last `edge` (the mask's corners, a ragged last tile) and `inner` drawn in
    between by a generator seeded with n. An fp32 reference of every row of a prefill of 16 sequences
    up to 8192 long would be minutes of fp32 GEMMs; a wrong layout or mask shows in any row."""
    if n <= 2 * edge + inner:
        return list(range(n))
    middle = random.Random(n).sample(range(edge, n - edge), inner)
    return list(range(edge)) + sorted(middle) + list(range(n - edge, n))


def serving_reference(q, k, v, causal, rows, budget=1 << 28):
    """O in fp32 math of the query rows `rows` (positions, a list) of q [B, H, Nq, D] with k, v
    [B, Hkv, Nk, D], as [B, H, len(rows), D]: Q head h reads K/V head h // (H / Hkv), causal aligned
    to the end (query i sees keys j <= Nk - Nq + i; common/problem.hpp). The queries of one K/V head
    are stacked, so K and V are widened to fp32 once, never repeated per Q head; the scores go a
    block of rows at a time, at most `budget` fp32 values."""
    bsz, heads, nq, d = q.shape
    hkv, nk = k.shape[1], k.shape[2]
    group = heads // hkv
    kt, vf = k.float().transpose(-1, -2), v.float()  # [B, Hkv, D, Nk], [B, Hkv, Nk, D]
    out = torch.empty(bsz, heads, len(rows), d, dtype=torch.float32, device=q.device)
    step = max(1, budget // (bsz * heads * nk))
    for i in range(0, len(rows), step):
        block = torch.tensor(rows[i:i + step], dtype=torch.int64, device=q.device)
        n = len(rows[i:i + step])
        # Q heads h = hk·G + g are adjacent: [B, H, n, D] is [B, Hkv, G·n, D], one GEMM per K/V head.
        s = torch.matmul(q[:, :, block].float().reshape(bsz, hkv, group * n, d), kt) * d ** -0.5
        if causal:
            last = block[:, None] + (nk - nq)
            s = s.reshape(bsz, hkv, group, n, nk).masked_fill(
                torch.arange(nk, device=q.device)[None, :] > last, float("-inf")).reshape(bsz, hkv, group * n, nk)
        out[:, :, i:i + n] = torch.matmul(torch.softmax(s, dim=-1), vf).reshape(bsz, heads, n, d)
    return out


def varlen_reference(q, k, v, cu, causal):
    """serving_reference of each sequence of a packed batch (q [total_q, H, D], k, v [total_k, Hkv,
    D], cu the host prefix sums of the lengths, keys = queries) at its sampled rows: (the packed
    indices of those rows, O [rows, H, D] fp32)."""
    index, parts = [], []
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        rows = sampled_rows(hi - lo)
        one = [x[lo:hi].transpose(0, 1)[None] for x in (q, k, v)]
        parts.append(serving_reference(*one, causal, rows)[0].transpose(0, 1))
        index += [lo + r for r in rows]
    out = torch.empty(len(index), q.shape[1], q.shape[2], dtype=torch.float32, device=q.device)
    at = 0
    for part in parts:
        out[at:at + part.shape[0]] = part
        at += part.shape[0]
    return index, out


def paged_pools(k, v, page_size):
    """K and V [B, Hkv, Nk, D] as page pools with the pages of every sequence shuffled: the ladder's
    [num_pages, Hkv, page_size, D] and FlashAttention's [num_pages, page_size, Hkv, D] (same pages,
    same places), and the block table [B, pages_per_seq] int32; a last page's rows past Nk are zero."""
    bsz, hkv, nk, d = k.shape
    pages = -(-nk // page_size)
    table = torch.randperm(bsz * pages, device=k.device)  # logical page b·pages + p lives at table[...]
    ours, theirs = [], []
    for x in (k, v):
        padded = torch.zeros(bsz, hkv, pages * page_size, d, dtype=x.dtype, device=x.device)
        padded[:, :, :nk] = x
        logical = padded.reshape(bsz, hkv, pages, page_size, d).permute(0, 2, 1, 3, 4).reshape(
            bsz * pages, hkv, page_size, d)
        pool = torch.empty_like(logical)
        pool[table] = logical
        ours.append(pool)
        pool = torch.empty(bsz * pages, page_size, hkv, d, dtype=x.dtype, device=x.device)
        pool[table] = logical.transpose(1, 2)
        theirs.append(pool)
        padded = logical = None
    return ours, theirs, table.reshape(bsz, pages).to(torch.int32).contiguous()


def load_fa4_varlen():
    """FlashAttention-4's flash_attn_varlen_func, or None."""
    try:
        from flash_attn.cute import flash_attn_varlen_func
    except Exception:
        return None
    return flash_attn_varlen_func


def first(res):
    return res[0] if isinstance(res, (tuple, list)) else res


def serve_candidates(s, q, k, v, backends, fa4, fa4_varlen, libs, variants, bf16):
    """[(name, kv_layout, make)] for shape s, make() -> (callable, function returning O in the
    reference's layout: [B, H, Nq, D], varlen [total_q, H, D]). q, k, v: [B, H, Nq, D] and
    [B, Hkv, Nk, D], or packed [total, H(kv), D] for varlen."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    causal, varlen, paged = s["causal"], bool(s["q_lens"]), s["page_size"] > 0
    out = []
    for name in [b for b in backends if b in BACKENDS]:
        def make(backend=BACKENDS[name]):
            if varlen:
                raise RuntimeError("SDPA takes no packed variable-length batch (cu_seqlens)")
            if causal and s["seqlen"] != s["kv_seqlen"]:
                raise RuntimeError("SDPA's is_causal aligns the mask to the top left, not to the end")
            box = {}

            def call():
                with sdpa_kernel([backend]):
                    box["out"] = sdpa(q, k, v, is_causal=causal, enable_gqa=s["kv_heads"] != s["heads"])
            return call, lambda: box["out"]
        out.append((name, "contiguous", make))
    if fa4 is not None:
        def make_fa4():
            box = {}
            if varlen:
                cu = torch.tensor(s["cu"], dtype=torch.int32, device=q.device)
                if fa4_varlen is None:
                    raise RuntimeError("flash_attn.cute has no flash_attn_varlen_func")

                def call():
                    box["out"] = first(fa4_varlen(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=s["seqlen"],
                                                  max_seqlen_k=s["kv_seqlen"], causal=causal))
                return call, lambda: box["out"]
            qt = q.transpose(1, 2).contiguous()
            if paged:  # FA4's paged form: pools [num_pages, page_size, Hkv, D], seqused_k the lengths
                if fa4_varlen is None:
                    raise RuntimeError("flash_attn.cute has no flash_attn_varlen_func")
                (kp, vp), table = s["fa4_pools"], s["block_table"]
                used = torch.full((s["batch"],), s["kv_seqlen"], dtype=torch.int32, device=q.device)

                def call():
                    box["out"] = first(fa4_varlen(qt, kp, vp, seqused_k=used, page_table=table,
                                                  max_seqlen_k=s["kv_seqlen"], causal=causal))
            else:
                kt, vt = (x.transpose(1, 2).contiguous() for x in (k, v))

                def call():
                    box["out"] = first(fa4(qt, kt, vt, causal=causal))
            return call, lambda: box["out"].transpose(1, 2)
        out.append(("fa4", "packed" if varlen else "paged" if paged else "contiguous", make_fa4))
    for label, vid in variants:
        def make_ladder(label=label, vid=vid):
            if varlen:
                cu = torch.tensor(s["cu"], dtype=torch.int32, device=q.device)
                call, o = ladder_serving_call(libs, label, vid, s, q, k, v, bf16, cu_q=cu, cu_k=cu)
            elif paged:
                (kp, vp), table = s["ladder_pools"], s["block_table"]
                call, o = ladder_serving_call(libs, label, vid, s, q, kp, vp, bf16, block_table=table)
            else:
                call, o = ladder_serving_call(libs, label, vid, s, q, k, v, bf16)
            return call, lambda: o
        out.append((row_name(label, vid), "packed" if varlen else "paged" if paged else "contiguous", make_ladder))
    return out


def serve_main(args, argv, backends, libs, variants, fa4, fa4_version, flush, gpu, write_file):
    """--pass serve: the device copy's ceiling, then every shape of the grid (rows as they come)."""
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    fa4_varlen = load_fa4_varlen() if fa4 is not None else None
    rows = []

    def write(final=False):
        write_file(rows, final, "serve: Q, K, V in each candidate's layout (contiguous copies, same values), "
                   "O checked against an fp32-math reference; GB/s count Q, K, V, O once; ")

    # The bandwidth ceiling of the day: a device-to-device copy, timed the same way.
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    fn, method = as_graph(lambda: dst.copy_(src))
    t = time_rounds([fn], flush)[0]
    copy_gbps = 2 * COPY_BYTES / (t["median_ms"] * 1e-3) / 1e9
    rows.append({"kind": "copy", "name": "device-copy-4GiB", "bytes": 2 * COPY_BYTES, **t, "timing_method": method,
                 "gbps": copy_gbps})
    src = dst = fn = None
    print(f"{'device-to-device copy, 4 GiB':38s} {copy_gbps:.0f} GB/s (read + write; the ceiling below)", flush=True)

    failed = []
    for s in serve_shapes(args.quick, args.grid, args.seed, args.varlen_count, args.varlen_max, getattr(args, "head_dim", 128)):
        d, h, hkv = s["head_dim"], s["heads"], s["kv_heads"]
        if s["q_lens"]:
            total = sum(s["q_lens"])
            s["cu"] = [0]
            for n in s["q_lens"]:
                s["cu"].append(s["cu"][-1] + n)
            q = torch.randn(total, h, d, dtype=dtype, device="cuda")
            k, v = (torch.randn(total, hkv, d, dtype=dtype, device="cuda") for _ in range(2))
            index, ref = varlen_reference(q, k, v, s["cu"], s["causal"])
            index = torch.tensor(index, dtype=torch.int64, device="cuda")
            sample = lambda o: o[index]  # noqa: E731  the sampled rows of a packed O
        else:
            q = torch.randn(s["batch"], h, s["seqlen"], d, dtype=dtype, device="cuda")
            k, v = (torch.randn(s["batch"], hkv, s["kv_seqlen"], d, dtype=dtype, device="cuda") for _ in range(2))
            positions = sampled_rows(s["seqlen"])
            ref = serving_reference(q, k, v, s["causal"], positions)
            index = torch.tensor(positions, dtype=torch.int64, device="cuda")
            sample = lambda o: o[:, :, index]  # noqa: E731
            if s["page_size"]:
                s["ladder_pools"], s["fa4_pools"], s["block_table"] = paged_pools(k, v, s["page_size"])
        flops, nbytes = serve_flops(s), serve_bytes(s)
        base = {"kind": "attention", "pass": "serve", "shape_kind": s["kind"], "batch": s["batch"], "heads": h,
                "kv_heads": hkv, "seqlen": s["seqlen"], "kv_seqlen": s["kv_seqlen"], "head_dim": d,
                "causal": s["causal"], "dtype": args.dtype, "page_size": s["page_size"], "flops": flops,
                "bytes": nbytes, "reference": "fp32", "checked_rows": int(ref.shape[0] if s["q_lens"] else ref.shape[2])}
        if s["q_lens"]:
            base["q_lens"] = s["q_lens"]
        shape_rows, fns, keep = [], [], []
        for name, layout, make in serve_candidates(s, q, k, v, backends, fa4, fa4_varlen, libs, variants,
                                                   args.dtype == "bf16"):
            row = {**base, "name": name, "kv_layout": layout}
            try:
                call, output = make()
                keep.append(call)
                call()  # a peer that refuses the shape raises here; FA4 compiles here
                torch.cuda.synchronize()
                output_check(row, sample(output()), ref, args.dtype)
                fn, row["timing_method"] = as_graph(call)
                fns.append(fn)
            except Exception as e:  # refused, unknown to the library, or failed: say why
                row["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            shape_rows.append(row)
        timings = iter(time_rounds(fns, flush, rounds=getattr(args, "rounds", 3))) if fns else iter(())
        for row in shape_rows:
            if "error" not in row:
                t = next(timings)
                gbps = nbytes / (t["median_ms"] * 1e-3) / 1e9
                row.update(t, gbps=gbps, pct_of_copy=100 * gbps / copy_gbps,
                           tflops=flops / (t["median_ms"] * 1e-3) / 1e12)
            rows.append(row)
            if row.get("output_check") == "FAIL":
                failed.append(row)
            what = f"{row['name']:38s} {describe(s, args.dtype)} [{row['kv_layout']}]: "
            if "error" in row:
                print(what + "skipped, " + row["error"], flush=True)
            else:
                print(what + f"{row['gbps']:.0f} GB/s ({row['pct_of_copy']:.0f}% of copy), {row['tflops']:.1f} TFLOP/s "
                      f"({row['timing_method']}), max|Δ| vs fp32 {row['max_abs_diff']:.2e} {row['output_check']}",
                      flush=True)
        q = k = v = ref = None
        for key in ("ladder_pools", "fa4_pools", "block_table"):
            s.pop(key, None)
        write()
    write(final=True)
    for row in failed:
        print(f"FAIL: {row['name']} {row['shape_kind']} B={row['batch']} H={row['heads']} Hkv={row['kv_heads']} "
              f"Nq={row['seqlen']} Nk={row['kv_seqlen']} causal={row['causal']} page={row['page_size']}: "
              f"max|Δ| {row['max_abs_diff']:.3g} vs fp32 ({100 * row['rel_diff']:.1f}% of max|ref|, "
              f"tolerance {100 * OUTPUT_TOLERANCE[args.dtype]:.0f}%)", file=sys.stderr)
    return 1 if failed else 0
