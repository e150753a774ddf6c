"""How scripts/peers.py times a call: CUDA-graph capture, interleaved passes, L2 flush, the
harness's warm-up and repetition rule, median and p20/p80 (common/timing.cpp's method in PyTorch)."""
import statistics

from peers_torch import torch


def percentile(sorted_values, p):
    pos = p * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


class L2Flush:
    """The L2 emptied before each timed repetition, as common/timing.hpp's L2Flush does: "read"
    sums a buffer twice the L2's size, which leaves the L2 holding clean lines of it (the default);
    "write" zeroes that buffer instead, leaving it full of dirty lines that the timed call then
    writes back (the method before 2026-12-02); "none" does nothing."""

    def __init__(self, l2_bytes, how="read"):
        self.how = how
        self.buf = torch.zeros(2 * l2_bytes // 4, dtype=torch.float32, device="cuda")
        self.sink = torch.zeros(1, dtype=torch.float32, device="cuda")

    def __call__(self):
        if self.how == "read":
            torch.sum(self.buf, 0, keepdim=True, out=self.sink)
        elif self.how == "write":
            self.buf.zero_()


def as_graph(fn, stream=None):
    """(callable that replays fn's kernels, "cuda-graph"), or (fn, "eager") if capture fails.
    `stream`: warm up and capture on that stream (a backward's: autograd runs each backward kernel
    on the stream of its forward, which must be the capturing one), else on fresh ones."""
    try:
        side = stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # library handles and workspaces are created outside the capture
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with (torch.cuda.graph(graph, stream=stream) if stream is not None else torch.cuda.graph(graph)):
            fn()
        torch.cuda.synchronize()
        return graph.replay, "cuda-graph"
    except Exception:  # not capturable: time it eagerly, and say so
        torch.cuda.synchronize()
        return fn, "eager"


def time_rounds(fns, flush, rounds=3, **kw):
    """Times each callable `rounds` times, interleaved, alternately in order and in reverse (as the
    ladder does, so a drift of the clocks cannot favour the first); returns a summary per callable."""
    per = [[] for _ in fns]
    medians = [[] for _ in fns]
    for r in range(rounds):
        order = list(enumerate(fns))
        if r % 2 == 1:
            order.reverse()
        for i, fn in order:
            t = time_fn(fn, flush, **kw)
            per[i] += t["samples_ms"]
            medians[i].append(t["median_ms"])
    out = []
    for samples, meds in zip(per, medians):
        s = sorted(samples)
        out.append({"median_ms": statistics.median(s), "p20_ms": percentile(s, 0.2),
                    "p80_ms": percentile(s, 0.8), "samples_ms": samples, "round_medians_ms": meds})
    return out


def time_fn(fn, flush, warmup_ms=25.0, min_reps=5, max_reps=50, target_ms=100.0):
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    # Warm-up for at least warmup_ms and two calls.
    spent, calls = 0.0, 0
    while calls < 2 or spent < warmup_ms:
        start.record()
        fn()
        end.record()
        end.synchronize()
        spent += start.elapsed_time(end)
        calls += 1
    samples = []
    while len(samples) < max_reps and (len(samples) < min_reps or sum(samples) < target_ms):
        flush()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    s = sorted(samples)
    return {"median_ms": statistics.median(s), "p20_ms": percentile(s, 0.2),
            "p80_ms": percentile(s, 0.8), "samples_ms": samples}
