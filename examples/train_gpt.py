#!/usr/bin/env python3
"""The course's capstone: a small GPT trained on PyTorch's F.scaled_dot_product_attention and on the
ladder's kernels (ladder_attention.attention, forward and backward), from the same seed on the same
data in the same order, for each of --seeds seeds: the loss curves show the kernels train a model.

    python3 examples/train_gpt.py                       # both backends, the defaults below (one H200)
    python3 examples/train_gpt.py --steps 300           # a quick look
    python3 examples/train_gpt.py --device cpu --attention sdpa --layers 1 --width 64 --heads 1 \\
        --context 64 --batch 8 --steps 30               # no GPU: SDPA only
    python3 scripts/plot_training.py out/DATE-train-gpt.json   # the PNG again, from the JSON alone

Data, generated from --data-seed (nothing is downloaded): a stream of segments, each opened by a
token naming its kind. Prose: a sparse bigram chain over 224 words. Brackets: three kinds nested up
to depth 6 among words; a closing one must match the innermost open one. Copy: random words, a prose
filler, the same words again (induction, "A B ... A -> B"). Sums: "ab+cd=efg", two-digit additions.
Recall: key-value word pairs, then keys asked again with their values. Each token's probability
under the source is known when it is drawn, so the source entropy (the floor) is printed beside the
unigram and bigram entropies (what a model reaches seeing no context, or only the last token).

Model: pre-LayerNorm GPT (learned positions, GELU MLP of 4x width, tied embeddings, no dropout), fp32
weights under autocast, --dtype fp16 (the default, with a GradScaler) or bf16. On an H200 both run the
ladder's kernels both ways: the forward is step 34's at head width 64 (step 33's at 128), which writes
the log-sum-exp the backward needs, and the backward step 40's (python/README.md). The JSON records the
variants that ran. On CPU: fp32, SDPA only. AdamW (0.9, 0.95; weight decay on
matrices), linear warm-up (at most a tenth of the steps), cosine decay to a tenth, clipping at 1.0.

Output in --out (default out/): <date>-train-gpt.json (provenance; per backend and seed every step's
loss, the eval points, the GradScaler's scale at each window's end, tokens/s: the median over windows
of up to 50 steps after the first, each closed by a synchronize) and <date>-train-gpt.png. With both,
a verdict: the mean final validation loss of each backend over the seeds, their difference against
the noise (the standard error of that difference from the seed-to-seed scatter; with --seeds 1, each
run's last 5 eval points' scatter about a line, a lower bound), the throughputs and their ratio.

Cost of the defaults (4 layers, width 256, 4 heads of 64, context 1024, batch 32, 3000 steps, 3 seeds):
26.6 MFLOP per token trained (6 x 3.2 M matmul parameters, plus causal attention 7·N·d a layer:
forward 2·N·d, backward 2.5x), 0.87 TFLOP a step, 2.6 PFLOP a run. On the H200 (2026-12-03, one
seed) a run took 34 s on SDPA and 40 s on the ladder's op, evaluation included; three seeds of both,
the ~10 s it takes 16 cores to draw 100 M tokens and the start-up fit one 10-minute command.
"""
import argparse
import json
import math
import multiprocessing
import pathlib
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from tqdm import tqdm
except ImportError:
    tqdm = None

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.append(str(REPO / "scripts"))
from plot_training import plot  # noqa: E402  (the PNG, also drawn from the JSON alone)

VOCAB, NW = 256, 224  # tokens; words are WORD0 .. 255
PROSE, BRACKETS, COPY, SUM, RECALL = range(5)  # segment markers (their own tokens)
END, BAR, PLUS, EQ, COMMA, COLON = range(5, 11)
OPEN, CLOSE, DIGIT, WORD0 = 11, 14, 20, 32  # 3 bracket kinds (open 11-13, close 14-16), digits 20-29
KINDS = (0.3, 0.2, 0.2, 0.15, 0.15)  # P(segment kind), in marker order
SUCCESSOR_COUNTS = (24, 16, 10, 6, 4, 2, 1, 1)  # a word's 8 successors, in 64ths
MAX_DEPTH, CHUNK = 6, 1 << 20


def successors(data_seed):
    """Each word's next-word distribution: a 64-entry table (a uniform index samples it) and its logs."""
    rng = random.Random(data_seed)
    table, logq = [], []
    for _ in range(NW):
        succ = rng.sample(range(NW), len(SUCCESSOR_COUNTS))
        table.append([s for s, c in zip(succ, SUCCESSOR_COUNTS) for _ in range(c)])
        logq.append({s: math.log(c / 64) for s, c in zip(succ, SUCCESSOR_COUNTS)})
    return table, logq


def sample_chunk(job):
    """(n tokens of stream `index` as bytes, their complete segments' -log p under the source (nats), the
    number of tokens those segments hold). Every branch below adds -log of the probability it chose."""
    data_seed, index, n = job
    table, logq = successors(data_seed)
    r = random.Random(f"{data_seed}/{index}").random
    out, nll, done = [], 0.0, (0.0, 0)
    log_nw = math.log(NW)

    def word(prev):  # the bigram chain's next word (uniform when there is none); returns (word, -log p)
        if prev is None:
            return int(r() * NW), log_nw
        w = table[prev][int(r() * 64)]
        return w, -logq[prev][w]

    def chain(end, stop):  # chain words until `end`, which follows each word with probability `stop`
        w, cost = word(None)
        out.append(WORD0 + w)
        while r() >= stop:
            w, c = word(w)
            out.append(WORD0 + w)
            cost += c - math.log1p(-stop)
        out.append(end)
        return cost - math.log(stop)

    while len(out) < n:
        done = (nll, len(out))
        u, kind = r(), 0
        while u >= KINDS[kind] and kind < len(KINDS) - 1:
            u -= KINDS[kind]
            kind += 1
        out.append(kind)
        nll -= math.log(KINDS[kind])
        if kind == PROSE:
            nll += chain(END, 1 / 48)
        elif kind == BRACKETS:  # weights: a word 4, each open 1 (below MAX_DEPTH), close 3 (inside), END 1 (outside)
            stack, last = [], None
            while out[-1] != END:
                n_open, n_close = 3 * (len(stack) < MAX_DEPTH), 3 * (len(stack) > 0)
                total = 4 + n_open + n_close + (not stack)
                u = r() * total
                if u < 4:
                    last, c = word(last)
                    out.append(WORD0 + last)
                    nll += c - math.log(4 / total)
                elif u < 4 + n_open:
                    stack.append(int(u - 4))
                    out.append(OPEN + stack[-1])
                    nll += math.log(total)
                else:  # the innermost bracket's closing one, or (outside all) END
                    closing = u < 4 + n_open + n_close
                    out.append(CLOSE + stack.pop() if closing else END)
                    nll += math.log(total / (3 if closing else 1))
        elif kind == COPY:  # span | filler | span END; the span ends with probability 1/12 per word
            span = [int(r() * NW)]
            while r() >= 1 / 12:
                span.append(int(r() * NW))
            nll += len(span) * log_nw - (len(span) - 1) * math.log(11 / 12) - math.log(1 / 12)
            out += [WORD0 + w for w in span] + [BAR]
            nll += chain(BAR, 1 / 24)
            out += [WORD0 + w for w in span] + [END]  # the copy and its end: certain, 0 nats
        elif kind == SUM:  # "ab+cd=efg" (two-digit numbers, a three-digit sum), then COMMA (2/3) or END
            stop = False
            while not stop:
                a, b = int(r() * 100), int(r() * 100)
                out += [DIGIT + a // 10, DIGIT + a % 10, PLUS, DIGIT + b // 10, DIGIT + b % 10, EQ,
                        DIGIT + (a + b) // 100, DIGIT + (a + b) // 10 % 10, DIGIT + (a + b) % 10]
                stop = r() < 1 / 3
                out.append(END if stop else COMMA)
                nll += 4 * math.log(10) - math.log(1 / 3 if stop else 2 / 3)
        else:  # RECALL: distinct keys with values, COLON, then keys asked again with their values
            keys, values = [], []
            stop = False
            while not stop:  # a key not declared yet, its value, then COLON (1/4) or another
                k = int(r() * NW)
                while k in keys:
                    k = int(r() * NW)
                nll += math.log(NW - len(keys)) + log_nw
                keys.append(k)
                values.append(int(r() * NW))
                out += [WORD0 + k, WORD0 + values[-1]]
                stop = r() < 1 / 4
                nll -= math.log(1 / 4 if stop else 3 / 4)
            out.append(COLON)
            stop = False
            while not stop:  # queries: a declared key, its value (certain), then END (1/3) or another
                i = int(r() * len(keys))
                out += [WORD0 + keys[i], WORD0 + values[i]]
                stop = r() < 1 / 3
                out += [END] if stop else []
                nll += math.log(len(keys)) - math.log(1 / 3 if stop else 2 / 3)
    return bytes(out[:n]), done[0], done[1]


def corpus(data_seed, first, n):
    """n tokens (uint8) from streams first, first + 1, ... of CHUNK tokens each, drawn in parallel, and
    the source's entropy (nats/token) over their complete segments. The same for any number of cores."""
    jobs = [(data_seed, first + i, min(CHUNK, n - i * CHUNK)) for i in range(-(-n // CHUNK))]
    if len(jobs) > 1:  # fork: before any CUDA work, the workers run plain Python
        with multiprocessing.get_context("fork").Pool(min(len(jobs), multiprocessing.cpu_count())) as pool:
            parts = pool.map(sample_chunk, jobs)
    else:
        parts = [sample_chunk(j) for j in jobs]
    tokens = np.frombuffer(bytearray(b"".join(p[0] for p in parts)), dtype=np.uint8)
    return tokens, sum(p[1] for p in parts) / max(1, sum(p[2] for p in parts))


def entropies(tokens):
    """Unigram entropy and the bigram chain's conditional entropy H(x_t | x_t-1), from counts (nats)."""
    def h(counts):
        p = counts[counts > 0] / counts.sum()
        return float(-(p * np.log(p)).sum())
    t = tokens.astype(np.int64)
    uni = h(np.bincount(t, minlength=VOCAB))
    return uni, h(np.bincount(t[:-1] * VOCAB + t[1:], minlength=VOCAB * VOCAB)) - h(np.bincount(t[:-1], minlength=VOCAB))


class Block(nn.Module):
    def __init__(self, width, heads, attend):
        super().__init__()
        self.heads, self.attend = heads, attend
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(self.attend(q, k, v).transpose(1, 2).reshape(b, n, c))  # q, k, v: [B, H, N, D]
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, a, attend):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, a.width), nn.Embedding(a.context, a.width)
        self.blocks = nn.ModuleList(Block(a.width, a.heads, attend) for _ in range(a.layers))
        self.ln = nn.LayerNorm(a.width)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:  # residual projections scaled down with depth (GPT-2)
                residual = name.endswith(("proj.weight", "out.weight"))
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * a.layers) if residual else 0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln(x), self.tok.weight)  # tied embeddings


def attention_for(backend):
    if backend == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    import ladder_attention
    return lambda q, k, v: ladder_attention.attention(q, k, v, causal=True)


def flops_per_token(a):
    """Training FLOPs per token: 6 x matmul parameters (forward 2, backward 4) and causal attention,
    forward 2·N·d per layer (QK^T and PV over N/2 keys on average) and backward 2.5x that."""
    return 6 * (12 * a.layers * a.width ** 2 + a.width * VOCAB) + 7 * a.layers * a.context * a.width


def progress(total, desc):
    """update(done, text): tqdm's bar where tqdm is installed, else a line rewritten after a \\r (stderr)."""
    bar, t0 = tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True) if tqdm else None, time.perf_counter()

    def update(done, text):
        if bar:
            bar.update(done - bar.n)
            bar.set_postfix_str(text)
            bar.close() if done == total else None
        else:
            print(f"\r{desc}: {done}/{total} steps, {time.perf_counter() - t0:.0f} s, {text}  ",
                  end="" if done < total else "\n", file=sys.stderr, flush=True)
    return update


def train(backend, a, seed, device, train_windows, val_windows):
    """One run from `seed` (the initial weights and the order of the windows); returns its record."""
    start, cuda = time.perf_counter(), device.type == "cuda"
    if backend == "ladder":
        from ladder_attention import ops as ladder_ops
    torch.manual_seed(seed)
    model = GPT(a, attention_for(backend)).to(device)
    run = torch.compile(model) if a.compile else model
    groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), fused=cuda)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    scaler = torch.amp.GradScaler("cuda", enabled=cuda and a.dtype == "fp16")
    warmup, window = min(a.warmup, max(1, a.steps // 10)), max(1, min(50, a.steps // 5))
    order = torch.randperm(len(train_windows), generator=torch.Generator().manual_seed(seed)).to(device)

    def loss_of(batch):
        with torch.autocast(device.type, dtype=dtype, enabled=cuda):
            return F.cross_entropy(run(batch[:, :-1].long()).float().flatten(0, 1), batch[:, 1:].long().flatten())

    @torch.no_grad()
    def evaluate():
        starts = range(0, len(val_windows), a.batch)
        return sum(loss_of(val_windows[i:i + a.batch]) for i in starts).item() / len(starts)

    losses, evals, rates, variants, scales = torch.zeros(a.steps, device=device), [], [], {}, []
    update, t0, first = progress(a.steps, f"{backend} seed {seed}"), time.perf_counter(), 0
    for step in range(a.steps):
        t = (step - warmup) / max(1, a.steps - warmup)
        for group in opt.param_groups:
            group["lr"] = a.lr * ((step + 1) / warmup if step < warmup else 0.1 + 0.45 * (1 + math.cos(math.pi * t)))
        loss = loss_of(train_windows[order[step * a.batch:(step + 1) * a.batch]])
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses[step] = loss.detach()  # no synchronization: read back at the end of a window
        done = step + 1
        at_eval = done % a.eval_every == 0 or done == a.steps
        if done % window and not at_eval:
            continue
        if cuda:
            torch.cuda.synchronize()
        if first >= window:  # the first window (autotuning, first allocations, compilation) is not timed
            rates.append((done - first) * a.batch * a.context / (time.perf_counter() - t0))
        if scaler.is_enabled():  # halved at each step skipped for an inf or NaN gradient
            scales.append((done, scaler.get_scale()))
        if backend == "ladder":
            variants.setdefault("train", dict(ladder_ops.LAST))
        text = f"loss {losses[step].item():.3f}"
        if at_eval:
            evals.append((done, evaluate()))
            text += f", val {evals[-1][1]:.3f}"
            if backend == "ladder":  # under no_grad the package runs its fastest forward
                variants.setdefault("eval_forward", ladder_ops.LAST["forward"])
        update(done, text + (f", {rates[-1] / 1e6:.2f} M tok/s" if rates else ""))
        t0, first = time.perf_counter(), done
    train_loss = losses.tolist()
    tail = train_loss[-max(1, min(50, a.steps // 10)):]
    rate = float(np.median(rates)) if rates else None
    halvings = sum(b < a_ for (_, a_), (_, b) in zip(scales, scales[1:]))
    return {"seed": seed, "train_loss": [round(x, 5) for x in train_loss], "eval": evals, "tokens_per_s": rate,
            "grad_scale": scales or None, "grad_scale_drops": halvings if scales else None,
            "tokens_per_s_windows": rates, "tflops": rate and rate * flops_per_token(a) / 1e12,
            "final_train_loss": sum(tail) / len(tail), "final_train_loss_steps": len(tail),
            "final_val_loss": evals[-1][1], "wall_s": time.perf_counter() - start, "variants": variants or None,
            "parameters": sum(p.numel() for p in model.parameters())}


def noise(run, n=5):
    """The scatter of a run's last n eval points about their least-squares line (NaN with fewer than 3)."""
    y = np.array([loss for _, loss in run["eval"][-n:]])
    x = np.arange(len(y))
    return float(np.sqrt(((y - np.polyval(np.polyfit(x, y, 1), x)) ** 2).sum() / (len(y) - 2))) if len(y) > 2 else math.nan


def runs_of(result, backend):
    """A backend's runs, the first seed's first."""
    return [result["runs"][backend]] + result.get("more_seeds", {}).get(backend, [])


def verdict(result):
    """The two backends compared: the difference of their mean final val losses against its noise.

    With two seeds or more for each, the noise is the standard error of that difference, from each
    backend's seed-to-seed scatter: the runs of one seed start from the same weights and see the same
    windows in the same order, but rounding makes them part within a few hundred steps, so the two
    backends' runs are compared as samples. With one seed, the noise is each run's last 5 eval points'
    scatter about a line: a lower bound, blind to a late drop one run makes and the other not yet."""
    s, la = (runs_of(result, b) for b in ("sdpa", "ladder"))
    fs, fl = (np.array([r["final_val_loss"] for r in runs]) for runs in (s, la))
    diff, n = float(fl.mean() - fs.mean()), min(len(fs), len(fl))
    if n >= 2:
        sigma = float(math.sqrt(fs.var(ddof=1) / len(fs) + fl.var(ddof=1) / len(fl)))
        how = f"the standard error of the difference of the means over {len(fs)} and {len(fl)} seeds"
    else:
        sigma = math.hypot(noise(s[0]), noise(la[0]))
        how = "the last 5 eval points of each run about a line, a lower bound"
    sigma = None if math.isnan(sigma) else sigma
    same = None if sigma is None else abs(diff) <= 2 * sigma
    pairs = [(a_["tokens_per_s"], b["tokens_per_s"]) for a_, b in zip(s, la) if a_["tokens_per_s"] and b["tokens_per_s"]]
    ratio = float(np.median([b / a_ for a_, b in pairs])) if pairs else None
    rate = {k: float(np.median([r["tokens_per_s"] for r in runs if r["tokens_per_s"]] or [0])) for k, runs in
            (("sdpa", s), ("ladder", la))}
    seeds = "" if len(fs) == 1 else f" (means over {len(fs)} and {len(fl)} seeds)"
    line = (f"verdict: final val loss sdpa {fs.mean():.4f}, ladder {fl.mean():.4f}{seeds}, "
            f"ladder - sdpa = {diff:+.4f}, "
            + ("noise unknown (fewer than 3 eval points)" if sigma is None else
               f"{abs(diff) / sigma:.1f}x the noise {sigma:.4f} ({how}): "
               + ("the same within 2x the noise" if same else "DIFFERENT beyond 2x the noise"))
            + f"; tokens/s sdpa {rate['sdpa'] / 1e6:.3f} M, ladder {rate['ladder'] / 1e6:.3f} M, "
            + (f"ladder/sdpa = {ratio:.3f}" if ratio else "no ratio (too few steps to time)"))
    return {"final_val_losses": {"sdpa": fs.tolist(), "ladder": fl.tolist()}, "val_loss_difference": diff,
            "noise": sigma, "noise_from": how, "same_within_noise": same, "tokens_per_s": rate,
            "tokens_per_s_ratio": ratio, "line": line}


def provenance(a, device):
    cuda = device.type == "cuda"
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": sys.argv, "args": vars(a), "seed": a.seed,
            "data_seed": a.data_seed, "device": str(device), "gpu": torch.cuda.get_device_name(device) if cuda else None,
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
            **tree_state()}


def tree_state():
    """commit, dirty and tree_hash from scripts/tree_state.py, which also answers in a copy of the tree
    that carries .tree-state.json (the GPU machine's: its .git, if any, is not the checkout's)."""
    try:
        sys.path.insert(0, str(REPO / "scripts"))
        import tree_state as ts
        s = ts.state()[0]
        return {"commit": s.get("commit") or None, "dirty": s.get("dirty"), "tree_hash": s.get("tree_hash")}
    except Exception as e:  # noqa: BLE001 (provenance must not stop a run)
        return {"commit": None, "dirty": "unknown", "tree_state_error": str(e)}


def check(a, device):
    """Exit with a message, before any data is drawn, on what cannot run."""
    if a.seeds < 1:
        sys.exit(f"error: --seeds {a.seeds}: at least one")
    if a.width % a.heads:
        sys.exit(f"error: --width {a.width} is not a multiple of --heads {a.heads}")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"error: --device cuda, but torch {torch.__version__} sees no CUDA GPU")
    if a.attention == "sdpa":
        return
    if device.type != "cuda":
        sys.exit(f"error: --attention {a.attention} needs a CUDA GPU: the ladder's kernels (ladder_attention) "
                 f"take CUDA tensors only. On {device.type}, use --attention sdpa.")
    if a.width // a.heads not in (64, 128):
        sys.exit(f"error: head dimension {a.width // a.heads} (--width / --heads): the ladder serves 64 and 128")
    sys.path.append(str(REPO / "python"))  # where a source checkout has it (an installed package comes first)
    import ladder_attention
    try:
        print(f"ladder_attention: {ladder_attention.library_path()}")
    except ladder_attention.LibraryNotFound as e:
        sys.exit(f"error: {e}\n(python3 -m pip install --no-build-isolation -e python, or LADDER_CAPI_LIB=path/libladder_capi.so)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attention", choices=("sdpa", "ladder", "both"), default="both", help="(default both: sdpa, then ladder)")
    p.add_argument("--device", help="cuda or cpu (default: cuda when torch sees a GPU)")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16", help="autocast's type on CUDA (CPU: fp32)")
    for flag, default, what in (("layers", 4, "blocks"), ("width", 256, "d_model"), ("heads", 4, "width / heads: 64 or 128"),
                                ("context", 1024, "tokens a sequence"), ("batch", 32, "sequences a step"), ("steps", 3000, ""),
                                ("warmup", 100, "warm-up steps, at most a tenth of --steps"), ("lr", 2e-3, "peak"),
                                ("eval-every", 100, "steps between eval points"), ("eval-batches", 8, "batches an eval point"),
                                ("weight-decay", 0.1, ""), ("clip", 1.0, "gradient norm"), ("seed", 0, "init and data order"),
                                ("data-seed", 0, "the language and its text")):
        p.add_argument(f"--{flag}", type=type(default), default=default, help=f"{what} (default {default})".lstrip())
    p.add_argument("--seeds", type=int, default=3, help="seeds --seed, --seed + 1, ...: each backend once per seed; "
                   "the verdict's noise is their seed-to-seed scatter (default 3; 1: the first seed only)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (both backends)")
    p.add_argument("--out", default=str(REPO / "out"), help="directory for the JSON and the PNG (default out/)")
    a = p.parse_args()
    device = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    check(a, device)
    t, n = time.perf_counter(), a.context + 1
    tokens, floor = corpus(a.data_seed, 0, max(a.steps * a.batch * n, 1 << 21))  # >= 2 M tokens for the entropies
    val, val_floor = corpus(a.data_seed, 1 << 30, a.eval_batches * a.batch * n)
    unigram, bigram = entropies(tokens[:1 << 24])
    data = {"train_tokens": len(tokens), "val_tokens": len(val), "unigram_entropy": unigram,
            "bigram_entropy": bigram, "source_entropy": floor, "val_source_entropy": val_floor, "uniform": math.log(VOCAB)}
    print(f"data: {len(tokens) / 1e6:.2f} M train and {len(val) / 1e6:.2f} M validation tokens in "
          f"{time.perf_counter() - t:.1f} s; nats/token: uniform {math.log(VOCAB):.3f}, unigram {unigram:.3f}, "
          f"bigram {bigram:.3f}, source (the floor) {floor:.3f}, of the validation text {val_floor:.3f}")
    windows = [torch.from_numpy(x[: len(x) // n * n]).view(-1, n).to(device) for x in (tokens, val)]
    fpt, step_tokens = flops_per_token(a), a.batch * a.context
    print(f"model: {a.layers} layers, width {a.width}, {a.heads} heads of {a.width // a.heads}, context {a.context}; "
          f"{fpt / 1e6:.1f} MFLOP/token to train, {fpt * step_tokens / 1e12:.3f} TFLOP a step of {step_tokens} "
          f"tokens, {fpt * step_tokens * a.steps / 1e15:.3f} PFLOP in all")
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{time.strftime('%Y-%m-%d')}-train-gpt.json"
    result = {"provenance": provenance(a, device), "data": data, "flops_per_token": fpt, "runs": {}}
    backends = ("sdpa", "ladder") if a.attention == "both" else (a.attention,)
    for i, seed in enumerate(range(a.seed, a.seed + a.seeds)):  # a seed's two runs back to back
        for backend in backends:
            r = train(backend, a, seed, device, *windows)
            if i == 0:
                result["runs"][backend] = r
            else:
                result.setdefault("more_seeds", {}).setdefault(backend, []).append(r)
            print(f"{backend}, seed {seed}: final train loss {r['final_train_loss']:.4f} (mean of the last "
                  f"{r['final_train_loss_steps']} steps), val {r['final_val_loss']:.4f}; "
                  f"{(r['tokens_per_s'] or 0) / 1e6:.3f} M tokens/s ({r['tflops'] or 0:.1f} TFLOP/s), {r['wall_s']:.1f} s"
                  + (f"; grad scale drops {r['grad_scale_drops']}" if r["grad_scale"] else "")
                  + (f"; kernels {r['variants']}" if r["variants"] else ""))
            if len(backends) == 2 and backend == "ladder":
                result["verdict"] = verdict(result)
            path.write_text(json.dumps(result, indent=1))  # after each run: a failing later run keeps the others
    print(f"wrote {path}")
    plot(result, path.with_suffix(".png"))
    if "verdict" in result:
        print(result["verdict"]["line"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
