"""Independent float64 check of the PLOT fixtures.

Written from the paper (Chen et al., "PLOT: Prompt Learning with Optimal Transport for
Vision-Language Models", ICLR 2023, eqs. 2-7 and Algorithm 1) and the settings in the fixtures'
metadata, not from the authors' module structure: the tiny ResNet CLIP of testdata/clip-rn-tiny
(written here from its README; checked against its forward.safetensors) whose attention pool
yields the global token and the M local tokens; N prompts per class (CoOp contexts, text
encoder of reference/common/clip64.py); the cost 1 − cos between local image features and prompt
text features; Sinkhorn with uniform marginals, ε, and the stop rule from the metadata (inner
stage, no gradient); logits e^s·⟨T*, sim⟩ (plus the global logit on ImageNet); cross entropy; the
prompt gradient with the plan fixed (outer stage) by autograd (torch float64 as the engine; checked
by central finite differences at sampled entries); SGD; the round with FedAvg of every prompt.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import st  # noqa: E402
from clip64 import Clip, checker, sgd_step, t64  # noqa: E402

CTX = "prompt_learner.ctx"


class ResNet:
    """CLIP's ModifiedResNet in eval mode, from testdata/clip-rn-tiny/README.md."""

    def __init__(self, w):
        self.w = {k: t64(v) for k, v in w.items() if k.startswith("visual.") and "num_batches" not in k}
        self.heads = self.w["visual.layer1.0.conv1.weight"].shape[0] * 32 // 64

    def bn(self, x, p):
        w = self.w
        return ((x - w[p + ".running_mean"][:, None, None]) / torch.sqrt(w[p + ".running_var"][:, None, None] + 1e-5)
                * w[p + ".weight"][:, None, None] + w[p + ".bias"][:, None, None])

    def block(self, x, p, stride):
        w = self.w
        o = F.relu(self.bn(F.conv2d(x, w[p + ".conv1.weight"]), p + ".bn1"))
        o = F.relu(self.bn(F.conv2d(o, w[p + ".conv2.weight"], padding=1), p + ".bn2"))
        if stride > 1:
            o = F.avg_pool2d(o, stride)
        o = self.bn(F.conv2d(o, w[p + ".conv3.weight"]), p + ".bn3")
        if p + ".downsample.0.weight" in w:
            s = F.avg_pool2d(x, stride) if stride > 1 else x
            s = self.bn(F.conv2d(s, w[p + ".downsample.0.weight"]), p + ".downsample.1")
        else:
            s = x
        return F.relu(o + s)

    def tokens(self, x):
        """All attention-pool outputs, [b, 1 + M, d]: token 0 from the mean query, 1..M local."""
        w = self.w
        for i, stride in [(1, 2), (2, 1), (3, 1)]:
            x = F.relu(self.bn(F.conv2d(x, w[f"visual.conv{i}.weight"], stride=stride, padding=1), f"visual.bn{i}"))
        x = F.avg_pool2d(x, 2)
        for li in range(1, 5):
            nb = len({k.split(".")[2] for k in w if k.startswith(f"visual.layer{li}.")})
            for bi in range(nb):
                x = self.block(x, f"visual.layer{li}.{bi}", 2 if (li > 1 and bi == 0) else 1)
        b, c, h, ww = x.shape
        t = x.reshape(b, c, h * ww).permute(0, 2, 1)
        t = torch.cat([t.mean(1, keepdim=True), t], 1) + w["visual.attnpool.positional_embedding"]
        p = "visual.attnpool."
        q = t @ w[p + "q_proj.weight"].T + w[p + "q_proj.bias"]
        k = t @ w[p + "k_proj.weight"].T + w[p + "k_proj.bias"]
        v = t @ w[p + "v_proj.weight"].T + w[p + "v_proj.bias"]
        H, L = self.heads, t.shape[1]
        dh = c // H
        q, k, v = (z.reshape(b, L, H, dh).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) / dh ** 0.5, -1)
        o = (a @ v).transpose(1, 2).reshape(b, L, c)
        return o @ w[p + "c_proj.weight"].T + w[p + "c_proj.bias"]


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


def sinkhorn(K, eps_stop, max_iter):
    """Uniform marginals a = 1/M (rows), b = 1/N (columns); r, c start at ones; each iteration
    r ← a/(K c), c ← b/(Kᵀ r); stop after the iteration where the batch mean of |r − r_prev|
    < eps_stop. Returns the plan, the iteration count and the stop test's values."""
    B, M, N = K.shape
    r, c = torch.ones(B, M), torch.ones(B, N)
    errs = []
    for i in range(max_iter):
        r0 = r
        r = (1.0 / M) / (K @ c[..., None])[..., 0]
        c = (1.0 / N) / (K.transpose(1, 2) @ r[..., None])[..., 0]
        errs.append(float((r - r0).abs().mean()))
        if errs[-1] < eps_stop:
            break
    return r[..., :, None] * K * c[..., None, :], len(errs), errs


class Model:
    def __init__(self, w, meta, tokens):
        self.rn = ResNet(w) if "visual.attnpool.c_proj.weight" in w else None
        self.text_clip = Clip(w, heads=w["ln_final.weight"].shape[0] // 64)
        self.s = float(np.exp(float(w["logit_scale"].reshape(()))))
        self.tokens = torch.as_tensor(tokens)
        self.N, self.C = int(meta["n_prompts"]), tokens.shape[0]
        self.eps, self.thresh, self.max_iter = float(meta["eps"]), float(meta["thresh"]), int(meta["max_iter"])

    def text(self, ctx):
        """Prompt-major: row n·C + c is prompt n for class c."""
        return torch.cat([self.text_clip.text(self.tokens, [ctx[n]]) for n in range(self.N)])

    def forward(self, ctx, images, imagenet, plan=None):
        with torch.no_grad():  # [b, 1 + M, d]; no gradient reaches the image side
            tok = self.rn.tokens(images) if self.rn else self.text_clip.image_tokens(images, [])
        b, M = tok.shape[0], tok.shape[1] - 1
        tf = self.text(ctx)
        tn = unit(tf).reshape(self.N, self.C, -1)
        loc = unit(tok[:, 1:])
        sim = torch.einsum("bmd,ncd->bcmn", loc, tn).reshape(b * self.C, M, self.N)
        info = None
        if plan is None:
            with torch.no_grad():
                plan, iters, errs = sinkhorn(torch.exp(-(1.0 - sim) / self.eps), self.thresh, self.max_iter)
            info = (iters, errs)
        logits = self.s * (plan * sim).sum((1, 2)).reshape(b, self.C)
        if imagenet:
            pool = unit(tf.reshape(self.N, self.C, -1).mean(0))  # mean of the raw features, then normalised
            logits = logits + self.s * unit(tok[:, 0]) @ pool.T
        return tok, tf, sim, plan, logits, info

    def loss(self, ctx, images, labels, imagenet, plan=None):
        out = self.forward(ctx, images, imagenet, plan)
        lg = out[4]
        return -torch.log_softmax(lg, -1)[torch.arange(len(labels)), torch.as_tensor(labels)].mean(), out

    def grad(self, ctx, images, labels, imagenet):
        c = ctx.detach().clone().requires_grad_(True)
        loss, out = self.loss(c, images, labels, imagenet)
        return float(loss), torch.autograd.grad(loss, c)[0], out


def verify_step(m, init, fname, d, check):  # noqa: C901
    s, meta = st.load(os.path.join(d, fname + ".safetensors"))
    imagenet = meta["dataset"] == "ImageNet"
    ctx = t64(init[CTX])
    images, labels = t64(s["images"]), s["labels"]
    loss, g, (tok, tf, sim, plan, logits, (iters, errs)) = m.grad(ctx, images, labels, imagenet)
    check(f"{fname} image_features (every encoder token)", s["image_features"], tok.permute(1, 0, 2), 1e-5)
    check(f"{fname} text_features", s["text_features"], tf, 1e-5)
    b, M = tok.shape[0], tok.shape[1] - 1
    check(f"{fname} sim", s["sim"], sim, 1e-5)
    stated = int(meta["ot_iterations"])
    print(f"     {fname}: Sinkhorn iterations float64 {iters}, theirs (float32) {stated}; stop-test values "
          + ", ".join(f"{e:.3e}" for e in errs) + f" (thresh {m.thresh})")
    if iters != stated:
        raise SystemExit(f"{fname}: float64 Sinkhorn ran {iters} iterations, theirs {stated}")
    check(f"{fname} plan", s["plan"], plan, 1e-4)
    check(f"{fname} logits", s["logits"], logits, 1e-5)
    check(f"{fname} loss", s["loss"], [loss], 1e-5)
    with torch.no_grad():
        uni = m.forward(ctx, images, imagenet, torch.full_like(plan, 1.0 / (M * m.N)))[4]
    print(f"     {fname}: with the uniform plan instead the logits differ by {float((uni - logits).abs().max() / logits.abs().max()):.2e} (relative); "
          f"max |plan·M·N − 1| = {float((plan * M * m.N - 1).abs().max()):.3f}")
    # FD of the loss with the plan held fixed (the outer stage's objective)
    rng = np.random.default_rng(0)
    c = ctx.clone()
    err = []
    with torch.no_grad():
        for _ in range(24):
            ix = tuple(int(rng.integers(k)) for k in c.shape)
            o = c[ix].item()
            c[ix] = o + 1e-6
            lp = float(m.loss(c, images, labels, imagenet, plan)[0])
            c[ix] = o - 1e-6
            lm = float(m.loss(c, images, labels, imagenet, plan)[0])
            c[ix] = o
            err.append(abs((lp - lm) / 2e-6 - g[ix].item()))
    check(f"{fname} finite differences at 24 entries, plan fixed (scale-relative)", [max(err) / float(g.abs().max())], [0.0], 1e-6, absolute=True)
    # the same loss differentiated through the Sinkhorn iterations as well: what not to do
    cc = ctx.detach().clone().requires_grad_(True)
    _, tfx, simx, _, _, _ = m.forward(cc, images, imagenet, plan)
    K = torch.exp(-(1.0 - simx) / m.eps)
    r, cvec = torch.ones(K.shape[0], K.shape[1]), torch.ones(K.shape[0], K.shape[2])
    for _ in range(iters):
        r = (1.0 / K.shape[1]) / (K @ cvec[..., None])[..., 0]
        cvec = (1.0 / K.shape[2]) / (K.transpose(1, 2) @ r[..., None])[..., 0]
    lg2 = m.s * ((r[..., :, None] * K * cvec[..., None, :]) * simx).sum((1, 2)).reshape(b, m.C)
    if imagenet:
        lg2 = lg2 + m.s * unit(tok[:, 0]) @ unit(tfx.reshape(m.N, m.C, -1).mean(0)).T
    l2 = -torch.log_softmax(lg2, -1)[torch.arange(len(labels)), torch.as_tensor(labels)].mean()
    g2 = torch.autograd.grad(l2, cc)[0]
    print(f"     {fname}: differentiating through the plan changes the gradient by {float((g2 - g).norm() / g.norm()):.3f} (relative)")
    check(f"{fname} grad", s["grad." + CTX], g, 1e-4)
    q = {CTX: ctx.clone()}
    sgd_step(q, {CTX: g}, float(meta["lr"]), {}, float(meta["weight_decay"]), float(meta["momentum"]))
    check(f"{fname} step1 (update)", s["step1." + CTX] - init[CTX], q[CTX] - ctx, 1e-4, s["step1." + CTX])


def verify_round(m, init, d, check):
    r, rm = st.load(os.path.join(d, "round.safetensors"))
    sizes = [int(x) for x in rm["client_sizes"].strip("[]").split(",")]
    stated = eval(rm["ot_iterations_per_batch"], {})
    bs, lr = int(rm["batch_size"]), float(rm["lr"])
    p0 = t64(init[CTX])
    trained = []
    for c in range(len(sizes)):
        q, buf, losses, its = {CTX: p0.clone()}, {}, [], []
        ims, lbs = t64(r[f"client{c}.images"]), r[f"client{c}.labels"]
        for b in range(0, len(ims), bs):
            loss, g, out = m.grad(q[CTX], ims[b:b + bs], lbs[b:b + bs], False)
            losses.append(loss)
            its.append(out[5][0])
            sgd_step(q, {CTX: g}, lr, buf, float(rm["weight_decay"]), float(rm["momentum"]))
        if its != stated[c]:
            raise SystemExit(f"client{c}: Sinkhorn iterations {its}, theirs {stated[c]}")
        check(f"client{c}.batch_losses", r[f"client{c}.batch_losses"], losses, 1e-5)
        check(f"client{c}.trained (update)", r[f"client{c}.trained.{CTX}"] - init[CTX], q[CTX] - p0, 1e-4,
              r[f"client{c}.trained.{CTX}"])
        trained.append(q[CTX])
    n = sum(sizes)
    avg = sum(t * (ni / n) for t, ni in zip(trained, sizes))
    check("global (update)", r["global." + CTX] - init[CTX], avg - p0, 1e-4, r["global." + CTX])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testdata", default=os.path.join(HERE, "..", "..", "testdata"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    worst = {}
    check = checker(worst)
    d = os.path.join(a.testdata, "plot")
    for clip_dir, init_name, steps, rnd in [("clip-tiny", "init", ["step", "step_imagenet"], True),
                                            ("clip-rn-tiny", "rn_init", ["rn_step"], False)]:
        w, _ = st.load(os.path.join(a.testdata, clip_dir, "openai.safetensors"))
        init, imeta = st.load(os.path.join(d, init_name + ".safetensors"))
        if imeta["clip"] != clip_dir:
            raise SystemExit(f"{init_name}: made on {imeta['clip']}, not {clip_dir}")
        s, meta = st.load(os.path.join(d, steps[0] + ".safetensors"))
        m = Model(w, meta, s["tokens"])
        f, _ = st.load(os.path.join(a.testdata, clip_dir, "forward.safetensors"))
        with torch.no_grad():
            img = m.rn.tokens(t64(f["images"]))[:, 0] if m.rn else m.text_clip.image(t64(f["images"]), [])
            check(f"{clip_dir} forward image_features (the float64 encoder's global token)", f["image_features"], img, 1e-5)
            check(f"{clip_dir} forward text_features (the float64 text tower)", f["text_features"],
                  m.text_clip.text(f["tokens"], []), 1e-5)
        for name in steps:
            verify_step(m, init, name, d, check)
        if rnd:
            verify_round(m, init, d, check)
    k = max(worst, key=worst.get)
    print(f"all checks pass; worst {k}: {worst[k]:.2f} of its tolerance")


if __name__ == "__main__":
    main()
