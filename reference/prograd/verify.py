"""Independent float64 check of the ProGrad fixtures.

Written from the paper (Zhu et al., "Prompt-aligned Gradient for Prompt Tuning", ICCV 2023,
eqs. 3-6) and the settings in the fixtures' metadata, not from the authors' module structure:
CoOp's context at positions 1..n of "X X X X class." (reference/common/clip64.py, the float64 tiny
CLIP, itself checked against testdata/clip-tiny/forward.safetensors), the cross entropy
L_ce, the distillation term L_kd = T²·mean_b CE(softmax(zs/T), softmax(logits/T)) towards the
zero-shot CLIP with the hand-crafted prompt, their gradients G_ce and G_kd by autograd (torch
float64 as the engine; checked by central finite differences at sampled entries), and the update
direction G = G_ce if G_ce·G_kd ≥ 0, else G_ce − λ·(G_ce·G_kd/|G_kd|²)·G_kd; SGD with momentum and
weight decay; the round: each client's local epoch, then FedAvg of the context (weights n_i/n).
"""
import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import st  # noqa: E402
from clip64 import Clip, checker, sgd_step, t64  # noqa: E402

CTX = "prompt_learner.ctx"


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


class Model:
    def __init__(self, clip, scale, meta, tokens, template_tokens):
        self.clip, self.s = clip, float(np.exp(scale))
        self.T, self.lam = float(meta["T"]), float(meta["lambda"])
        self.tokens = torch.as_tensor(tokens)
        with torch.no_grad():
            self.zt = unit(clip.text(template_tokens, []))

    def forward(self, ctx, images):
        fi = self.clip.image(images, [])
        ft = self.clip.text(self.tokens, [ctx])
        with torch.no_grad():
            zl = self.s * unit(fi) @ self.zt.T  # the zero-shot image feature is the plain one
        return fi, ft, self.s * unit(fi) @ unit(ft).T, zl

    def losses(self, ctx, images, labels):
        _, _, lg, zl = self.forward(ctx, images)
        ce = -torch.log_softmax(lg, -1)[torch.arange(len(labels)), torch.as_tensor(labels)].mean()
        kd = -(torch.softmax(zl / self.T, -1) * torch.log_softmax(lg / self.T, -1)).sum(-1).mean() * self.T ** 2
        return ce, kd

    def direction(self, ctx, images, labels):
        c = ctx.detach().clone().requires_grad_(True)
        ce, kd = self.losses(c, images, labels)
        ga = torch.autograd.grad(ce, c, retain_graph=True)[0]
        gb = torch.autograd.grad(kd, c)[0]
        dot = float((ga * gb).sum())
        cos = dot / float(ga.norm() * gb.norm())
        g = ga - self.lam * dot / float((gb * gb).sum()) * gb if dot < 0 else ga
        return float(ce), float(kd), ga, gb, cos, g


def fd_check(m, ctx, images, labels, ga, gb, check, name, n=16, h=1e-6, seed=0):
    rng = np.random.default_rng(seed)
    c = ctx.clone()
    ea, eb = [], []
    with torch.no_grad():
        for _ in range(n):
            ix = tuple(int(rng.integers(k)) for k in c.shape)
            o = c[ix].item()
            c[ix] = o + h
            pa, pb = m.losses(c, images, labels)
            c[ix] = o - h
            ma, mb = m.losses(c, images, labels)
            c[ix] = o
            ea.append(abs((float(pa) - float(ma)) / (2 * h) - ga[ix].item()))
            eb.append(abs((float(pb) - float(mb)) / (2 * h) - gb[ix].item()))
    check(f"{name} finite differences of L_ce at {n} entries (scale-relative)", [max(ea) / float(ga.abs().max())], [0.0], 1e-6, absolute=True)
    check(f"{name} finite differences of L_kd at {n} entries (scale-relative)", [max(eb) / float(gb.abs().max())], [0.0], 1e-6, absolute=True)


def verify_step(m, init, fname, d, check):
    s, meta = st.load(os.path.join(d, fname + ".safetensors"))
    m.T, m.lam = float(meta["T"]), float(meta["lambda"])
    ctx = t64(init[CTX])
    images, labels = t64(s["images"]), s["labels"]
    check(f"{fname} zs_text_features (normalised)", s["zs_text_features"], m.zt, 1e-5)
    with torch.no_grad():
        fi, ft, lg, zl = m.forward(ctx, images)
    check(f"{fname} image_features", s["image_features"], fi, 1e-5)
    check(f"{fname} text_features", s["text_features"], ft, 1e-5)
    check(f"{fname} logits", s["logits"], lg, 1e-5)
    check(f"{fname} zs_logits", s["zs_logits"], zl, 1e-5)
    ce, kd, ga, gb, cos, g = m.direction(ctx, images, labels)
    fd_check(m, ctx, images, labels, ga, gb, check, fname)
    check(f"{fname} xe_loss", s["xe_loss"], [ce], 1e-5)
    check(f"{fname} kl_loss", s["kl_loss"], [kd], 1e-5)
    check(f"{fname} loss (= xe_loss)", s["loss"], [ce], 1e-5)
    check(f"{fname} grad_xe", s["grad_xe." + CTX], ga, 1e-4)
    check(f"{fname} grad_kl", s["grad_kl." + CTX], gb, 1e-4)
    check(f"{fname} cos", s["cos"], [cos], 1e-5)
    if int(s["projected"][0]) != int(cos < 0) or meta["branch"] != ("projected" if cos < 0 else "not projected"):
        raise SystemExit(f"{fname}: branch recorded {int(s['projected'][0])} / {meta['branch']}, float64 cos {cos}")
    print(f"     {fname}: cos(G_ce, G_kd) = {cos:.4f}, {'projected' if cos < 0 else 'not projected'}; "
          f"the update differs from plain CE's by {float((g - ga).norm() / ga.norm()):.3f} (relative)")
    check(f"{fname} grad (the update direction)", s["grad." + CTX], g, 1e-4)
    q = {CTX: ctx.clone()}
    sgd_step(q, {CTX: g}, float(meta["lr"]), {}, float(meta["weight_decay"]), float(meta["momentum"]))
    check(f"{fname} step1 (update)", s["step1." + CTX] - init[CTX], q[CTX] - ctx, 1e-4, s["step1." + CTX])
    u = float((q[CTX] - ctx).abs().max())
    print(f"     {fname}: max|p| {float(ctx.abs().max()):.3f}, max|update| {u:.2e}; float32 spacing of max|step1| "
          f"{float(np.spacing(np.float32(np.abs(s['step1.' + CTX]).max()))) / u:.1e} of it, weight decay's part "
          f"{float((float(meta['lr']) * float(meta['weight_decay']) * ctx).abs().max()) / u:.1e} of it")
    return meta


def verify_init(m, d, check, meta):
    """init = init_random after the plain cross-entropy steps named in the metadata."""
    r, _ = st.load(os.path.join(d, "init_random.safetensors"))
    init, _ = st.load(os.path.join(d, "init.safetensors"))
    s, _ = st.load(os.path.join(d, "step.safetensors"))
    words = meta["init"].split()
    steps, lr = int(words[words.index("SGD") - 1]), float(words[words.index("lr") + 1])
    c = t64(r[CTX])
    for _ in range(steps):
        x = c.clone().requires_grad_(True)
        ce, _ = m.losses(x, t64(s["images"]), s["labels"])
        c = c - lr * torch.autograd.grad(ce, x)[0]
    check(f"init = init_random after {steps} CE steps (update)", init[CTX] - r[CTX], c - t64(r[CTX]), 1e-4, init[CTX])


def verify_round(m, init, d, check):
    r, rm = st.load(os.path.join(d, "round.safetensors"))
    m.T, m.lam = float(rm["T"]), float(rm["lambda"])
    sizes = [int(x) for x in rm["client_sizes"].strip("[]").split(",")]
    bs, lr = int(rm["batch_size"]), float(rm["lr"])
    p0 = t64(init[CTX])
    trained, branches = [], []
    for c in range(len(sizes)):
        q, buf, xs, ks, cs = {CTX: p0.clone()}, {}, [], [], []
        ims, lbs = t64(r[f"client{c}.images"]), r[f"client{c}.labels"]
        for b in range(0, len(ims), bs):
            ce, kd, _, _, cos, g = m.direction(q[CTX], ims[b:b + bs], lbs[b:b + bs])
            xs.append(ce)
            ks.append(kd)
            cs.append(cos)
            branches.append(cos < 0)
            sgd_step(q, {CTX: g}, lr, buf, float(rm["weight_decay"]), float(rm["momentum"]))
        check(f"client{c}.batch_xe_losses", r[f"client{c}.batch_xe_losses"], xs, 1e-5)
        check(f"client{c}.batch_kl_losses", r[f"client{c}.batch_kl_losses"], ks, 1e-5)
        check(f"client{c}.batch_cos", r[f"client{c}.batch_cos"], cs, 1e-5)
        check(f"client{c}.trained (update)", r[f"client{c}.trained.{CTX}"] - init[CTX], q[CTX] - p0, 1e-4,
              r[f"client{c}.trained.{CTX}"])
        trained.append(q[CTX])
    print(f"     round: batches projected {branches}")
    if not (any(branches) and not all(branches)):
        raise SystemExit("round: both branches should be taken")
    n = sum(sizes)
    avg = sum(t * (ni / n) for t, ni in zip(trained, sizes))
    check("global (update)", r["global." + CTX] - init[CTX], avg - p0, 1e-4, r["global." + CTX])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testdata", default=os.path.join(HERE, "..", "..", "testdata"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    w, _ = st.load(os.path.join(a.testdata, "clip-tiny", "openai.safetensors"))
    clip = Clip(w)
    worst = {}
    check = checker(worst)
    f, _ = st.load(os.path.join(a.testdata, "clip-tiny", "forward.safetensors"))
    with torch.no_grad():
        check("clip-tiny forward image_features (the float64 CLIP)", f["image_features"], clip.image(t64(f["images"]), []), 1e-5)
        check("clip-tiny forward text_features (the float64 CLIP)", f["text_features"], clip.text(f["tokens"], []), 1e-5)
    d = os.path.join(a.testdata, "prograd")
    init, _ = st.load(os.path.join(d, "init.safetensors"))
    s, meta = st.load(os.path.join(d, "step.safetensors"))
    m = Model(clip, float(w["logit_scale"].reshape(())), meta, s["tokens"], s["template_tokens"])
    verify_init(m, d, check, meta)
    verify_step(m, init, "step", d, check)
    verify_step(m, init, "step_aligned", d, check)
    verify_step(m, init, "step_t2", d, check)
    m.T, m.lam = float(meta["T"]), float(meta["lambda"])
    verify_round(m, init, d, check)
    k = max(worst, key=worst.get)
    print(f"all checks pass; worst {k}: {worst[k]:.2f} of its tolerance")


if __name__ == "__main__":
    main()
