#!/usr/bin/env python3
"""A numpy model of what the polynomial exponential (common/exp2_poly.hpp) costs in accuracy, for
chapter 32's prediction: query rows at N = 4096, D = 64 with fp16 Q, K, V, P and O
and fp32 sums, the exponentials of a quarter or a half of the n8 column tiles from the cubic (the
kernel's choice: tile j % k == k − 1), the rest exact; the max |O − fp64| over 8 × 16 rows, at the
harness's logits and at its large ones (Q × 5, K × 3). A model of the arithmetic, not the kernel
(one block, no online rescale, exact MUFU): it says how much the cubic adds to fp16's own error.

  scripts/exp2_poly_error_model.py        (numpy)
"""
import numpy as np

C1, C2, C3 = (np.float32(float.fromhex(h)) for h in ("0x1.640ea8p-1", "0x1.cf7a68p-3", "0x1.4095f0p-4"))
N, D, ROWS, TRIALS = 4096, 64, 16, 8


def exp2_poly(x):
    x = np.maximum(x.astype(np.float32), np.float32(-127))
    j = np.floor(x)
    f = (x - j).astype(np.float32)
    p = ((C3 * f + C2) * f + C1) * f + np.float32(1)
    return np.ldexp(p, j.astype(np.int32)).astype(np.float32)


def main():
    rng = np.random.default_rng(1)
    for name, qs, ks in (("harness logits", 1, 1), ("large logits (Q x 5, K x 3)", 5, 3)):
        worst = {0: [], 4: [], 2: []}
        for _ in range(TRIALS):
            q, k, v = (a.astype(np.float16).astype(np.float64) for a in
                       (rng.standard_normal((ROWS, D)) * qs, rng.standard_normal((N, D)) * ks,
                        rng.standard_normal((N, D))))
            x = (q @ k.T) / np.sqrt(D) * np.log2(np.e)
            x -= x.max(1, keepdims=True)
            ref = (np.exp2(x) @ v) / np.exp2(x).sum(1, keepdims=True)
            xs = x.astype(np.float32)
            for every in worst:
                p = np.exp2(xs).astype(np.float32)
                if every:
                    sel = (np.arange(N) // 8) % every == every - 1
                    p[:, sel] = exp2_poly(xs[:, sel])
                o = (p.astype(np.float16).astype(np.float64) @ v) / p.astype(np.float64).sum(1, keepdims=True)
                worst[every].append(np.abs(o.astype(np.float16).astype(np.float64) - ref).max())
        base = np.mean(worst[0])
        print(f"{name}: max |O - fp64| MUFU only {base:.3e}, a quarter {np.mean(worst[4]):.3e} "
              f"({np.mean(worst[4]) / base:.3f}x), a half {np.mean(worst[2]):.3e} ({np.mean(worst[2]) / base:.3f}x)")


if __name__ == "__main__":
    main()
