#!/usr/bin/env python3
"""A probe of examples/train_gpt.py's model on a GPU (its defaults: 4 layers, width 256, 4 heads of 64,
context 1024, batch 32, fp16 with a GradScaler), two questions the training run's loss cannot answer:

  1. Are the ladder's gradients as accurate as SDPA's on the tensors the run really makes? The model
     is trained STEPS steps on SDPA (sharp attention, the scaler's scale grown), one batch's q, k, v
     and scaled dO are recorded at every layer, and SDPA's kernel and ladder_attention.attention are
     each compared with an fp64 reference (relative L2 error of O, dQ, dK, dV): probe-grads.json.
  2. Where does a step's time go? torch.profiler over 20 steps per backend: probe-profile-*.txt
     (device time per kernel beside host time per op).

    python3 scripts/probe_train_gpt.py [STEPS (default 2900)] [OUT_DIR (default out)]"""
import json, math, sys, time, pathlib
import torch, torch.nn as nn, torch.nn.functional as F
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples")); sys.path.insert(0, str(REPO / "python"))
import train_gpt as tg
import ladder_attention as la

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2900
out_dir = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "out")
out_dir.mkdir(parents=True, exist_ok=True)
class A: pass
a = A(); a.layers, a.width, a.heads, a.context, a.batch = 4, 256, 4, 1024, 32
dev = torch.device("cuda")
n = a.context + 1
tokens, _ = tg.corpus(0, 0, (steps + 30) * a.batch * n)
windows = torch.from_numpy(tokens[: len(tokens) // n * n]).view(-1, n).to(dev)
record = {}
mode = {"attend": "sdpa"}
def attend(q, k, v):
    if mode["attend"] == "ladder":
        return la.attention(q, k, v, causal=True)
    if mode["attend"] == "record":
        i = len(record)
        record[i] = {"q": q.detach().clone(), "k": k.detach().clone(), "v": v.detach().clone()}
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.register_hook(lambda g, i=i: record[i].__setitem__("do", g.detach().clone()))
        return o
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
torch.manual_seed(0)
model = tg.GPT(type("a", (), dict(width=256, heads=4, layers=4, context=1024))(), attend).to(dev)
groups = [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
          {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=2e-3, betas=(0.9, 0.95), fused=True)
scaler = torch.amp.GradScaler("cuda")
order = torch.randperm(len(windows) - 1, generator=torch.Generator().manual_seed(0)).to(dev)
def loss_of(batch):
    with torch.autocast("cuda", dtype=torch.float16):
        return F.cross_entropy(model(batch[:, :-1].long()).float().flatten(0, 1), batch[:, 1:].long().flatten())
def step(i, total):
    warm = 100
    t = (i - warm) / max(1, total - warm)
    for g in opt.param_groups:
        g["lr"] = 2e-3 * ((i + 1) / warm if i < warm else 0.1 + 0.45 * (1 + math.cos(math.pi * t)))
    loss = loss_of(windows[order[i * a.batch:(i + 1) * a.batch]])
    scaler.scale(loss).backward(); scaler.unscale_(opt); nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)
    return loss
t0 = time.perf_counter()
for i in range(steps):
    step(i, 3000)
torch.cuda.synchronize()
print(f"trained {steps} steps on sdpa in {time.perf_counter() - t0:.1f} s, scale {scaler.get_scale()}", flush=True)
# one batch recorded: the layers' q, k, v and the scaled dO
mode["attend"] = "record"
batch = windows[order[steps * a.batch:(steps + 1) * a.batch]]
scaler.scale(loss_of(batch)).backward()
opt.zero_grad(set_to_none=True)
mode["attend"] = "sdpa"
def ref64(q, k, v, do):
    q, k, v = (x.double().requires_grad_() for x in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.autograd.grad(o, (q, k, v), do.double())
    return [o.detach()] + [x.detach() for x in g]
def run(fn, q, k, v, do):
    q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
    o = fn(q, k, v)
    g = torch.autograd.grad(o, (q, k, v), do)
    return [o.detach()] + [x.detach() for x in g]
res = {"steps": steps, "scale": scaler.get_scale(), "layers": []}
for i, r in sorted(record.items()):
    q, k, v, do = r["q"], r["k"], r["v"], r["do"]
    with torch.no_grad():
        s = (q.float() @ k.float().transpose(-1, -2)) / 8
        s = s.masked_fill(torch.ones(1024, 1024, dtype=torch.bool, device=dev).triu(1), -math.inf)
        pmax = torch.softmax(s, -1).amax(-1)
    ref = ref64(q, k, v, do)
    layer = {"layer": i, "q_absmax": q.abs().max().item(), "do_absmax": do.abs().max().item(),
             "logit_absmax": s[torch.isfinite(s)].abs().max().item(), "p_max_median": pmax.median().item(),
             "ref_absmax": [x.abs().max().item() for x in ref]}
    for name, fn in (("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                     ("ladder", lambda q, k, v: la.attention(q, k, v, causal=True))):
        got = run(fn, q, k, v, do)
        layer[name] = {t: {"rel_l2": ((g.double() - x).norm() / x.norm()).item(),
                           "max_abs_over_absmax": ((g.double() - x).abs().max() / x.abs().max()).item(),
                           "finite": bool(torch.isfinite(g).all())}
                       for t, g, x in zip(("out", "dq", "dk", "dv"), got, ref)}
    res["layers"].append(layer)
    print(json.dumps(layer), flush=True)
print("kernels:", la.ops.LAST)
(out_dir / "probe-grads.json").write_text(json.dumps(res, indent=1))
# profile 20 steps per backend
from torch.profiler import profile, ProfilerActivity
for backend in ("sdpa", "ladder"):
    mode["attend"] = backend
    for i in range(5):
        step(steps + i, 3000)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(20):
            step(steps + 5 + i, 3000)
        torch.cuda.synchronize()
    try:
        table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=25)
    except Exception:
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25)
    (out_dir / f"probe-profile-{backend}.txt").write_text(table)
    print(f"== {backend}\n" + table[:6000], flush=True)
