"""Independent float64 numpy check of the PromptSRC fixtures (no torch).

Written from the paper (Khattak et al., "Self-regulating Prompts", ICCV 2023, eqs. 1-6) and the
settings in the fixtures' metadata, not from the authors' module structure: independent deep
prompts in both encoders (the float64 tiny CLIP of reference/common/clip64.py: text prompts replace
positions 1..n of the embedding and of the input of blocks 1..J_t-1; the visual prompt is
appended after the patches before ln_pre and replaced at the input of blocks 1..J_v-1), the
self-regulating loss

    L = CE(s·cos(i, t), y) + λ_t·mean|t̂ − ẑ_t| + λ_i·mean|î − ẑ_i| + Σ p_zs·log(p_zs / p) / (B·C)

(ẑ_t: the mean over the templates of the frozen CLIP's text features, then normalised; ẑ_i: the
frozen image feature; p_zs = softmax(s·cos(ẑ_i, ẑ_t))), gradients by central finite differences
of the float64 loss in every entry of every prompt, SGD with momentum and weight decay, the
Gaussian prompt aggregation over epochs (weights N(e; μ, σ²), e = 1..E, normalised), FedAvg with
weights n_i/n and FLiP's server-side aggregation over rounds. Torch (float64) serves only as the
autograd engine; its gradients are checked by central finite differences at sampled entries.
"""
import argparse
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import st  # noqa: E402

from clip64 import Clip, rel, sgd_step, t64  # noqa: E402  (the float64 CLIP shared by these verifiers)


VIS = "image_encoder.VPT"


def names(meta):
    jt, jv = int(meta["prompt_depth_text"]), int(meta["prompt_depth_vision"])
    text = ["prompt_learner.ctx"] + [f"text_encoder.transformer.resblocks.{k}.VPT_shallow" for k in range(1, jt)]
    vis = [VIS] + [f"image_encoder.transformer.resblocks.{k}.VPT_shallow" for k in range(1, jv)]
    return text, vis


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


class Model:
    def __init__(self, clip, scale, meta, tokens, template_tokens):
        self.clip, self.s = clip, float(np.exp(scale))
        self.tw, self.iw = float(meta["text_loss_weight"]), float(meta["image_loss_weight"])
        self.text_names, self.vis_names = names(meta)
        self.tokens = torch.as_tensor(tokens)
        nt = int(meta["n_templates"])
        C = tokens.shape[0]
        with torch.no_grad():
            per = [clip.text(template_tokens[i * C:(i + 1) * C], []) for i in range(nt)]
        self.per_template = torch.stack(per)
        self.zt_raw = self.per_template.mean(0)  # mean of the raw features, then normalised
        self.zt = unit(self.zt_raw)

    def zero_shot_image(self, images):
        with torch.no_grad():
            return self.clip.image(images, [])

    def text(self, p):
        return self.clip.text(self.tokens, [p[k] for k in self.text_names])

    def image(self, p, images):
        return self.clip.image(images, [p[k] for k in self.vis_names])

    def loss(self, fi, ft, zi_raw, labels):
        i, t, zi = unit(fi), unit(ft), unit(zi_raw)
        lg = self.s * i @ t.T
        zl = self.s * zi @ self.zt.T
        lp = torch.log_softmax(lg, -1)
        ce = -lp[torch.arange(len(labels)), torch.as_tensor(labels)].mean()
        l1t = (t - self.zt).abs().mean()
        l1i = (i - zi).abs().mean()
        lz = torch.log_softmax(zl, -1)
        kl = (lz.exp() * (lz - lp)).sum()  # KL(p_zs || p), summed over the batch
        parts = {"logits": lg, "zs_logits": zl, "loss_ce": ce, "l1_text": l1t, "l1_image": l1i,
                 "kl_sum": kl, "loss_scl_logits": kl / lg.numel()}
        return ce + self.tw * l1t + self.iw * l1i + kl / lg.numel(), parts

    def batch_loss(self, p, images, labels):
        return self.loss(self.image(p, images), self.text(p), self.zero_shot_image(images), labels)[0]

    def grads(self, p, images, labels):
        q = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
        loss = self.batch_loss(q, images, labels)
        gs = torch.autograd.grad(loss, [q[k] for k in q])
        return float(loss), {k: g.detach() for k, g in zip(q, gs)}


def gauss_weights(xs, mu, sd):
    g = np.array([np.exp(-0.5 * ((x - mu) / sd) ** 2) for x in xs])
    return g / g.sum()


def fd_spot_check(m, p, images, labels, g, check, per_tensor=12, h=1e-6, seed=0):
    """Central differences of the float64 loss at sampled entries of every prompt tensor,
    against the autograd gradient (checks the autograd path, and that no kink of the L1
    terms lies within h)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for k in p:
            idx = [tuple(int(rng.integers(n)) for n in p[k].shape) for _ in range(per_tensor)]
            got, want = [], []
            for ix in idx:
                o = p[k][ix].item()
                p[k][ix] = o + h
                fp = float(m.batch_loss(p, images, labels))
                p[k][ix] = o - h
                fm = float(m.batch_loss(p, images, labels))
                p[k][ix] = o
                got.append((fp - fm) / (2 * h))
                want.append(g[k][ix].item())
            r = max(abs(a - b) for a, b in zip(got, want)) / max(g[k].abs().max().item(), 1e-30)
            check(f"step finite differences at {per_tensor} entries of {k}", np.array([r]), np.array([0.0]), 1e-6, absolute=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testdata", default=os.path.join(HERE, "..", "..", "testdata"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    w, _ = st.load(os.path.join(a.testdata, "clip-tiny", "openai.safetensors"))
    clip = Clip(w)
    scale = float(w["logit_scale"].reshape(()))
    d = os.path.join(a.testdata, "promptsrc")
    worst = {}

    def check(name, got, want, tol, spacing_of=None, absolute=False):
        got = np.asarray(got.detach() if torch.is_tensor(got) else got, np.float64)
        want = np.asarray(want.detach() if torch.is_tensor(want) else want, np.float64).reshape(got.shape)
        if absolute:
            r = float(np.abs(got - want).max())
        elif spacing_of is not None:  # updates: allow the float32 spacing of the stored values
            slack = float(np.spacing(np.float32(np.abs(spacing_of).max())))
            r = max(0.0, float(np.abs(got - want).max()) - slack) / max(np.abs(want).max(), 1e-30)
        else:
            r = rel(got, want)
        worst[name] = r / tol
        status = "ok" if r <= tol else "FAIL"
        print(f"{status:4s} {name:78s} {r:.2e} (tol {tol:.0e})", flush=True)
        if r > tol:
            raise SystemExit(1)

    init, _ = st.load(os.path.join(d, "init.safetensors"))
    p0 = {k: t64(v) for k, v in init.items()}
    s, meta = st.load(os.path.join(d, "step.safetensors"))
    want = set(names(meta)[0] + names(meta)[1])
    if set(init) != want:
        raise SystemExit(f"init holds {sorted(init)}, want {sorted(want)}")
    m = Model(clip, scale, meta, s["tokens"], s["template_tokens"])
    verify_step(m, p0, init, s, meta, check)
    verify_gpa(m, p0, init, d, check)
    verify_round(m, p0, init, d, check)
    k = max(worst, key=worst.get)
    print(f"all checks pass; worst {k}: {worst[k]:.2f} of its tolerance")


def verify_step(m, p0, init, s, meta, check):
    images = t64(s["images"])
    labels = s["labels"]
    check("step zs_text_features_per_template", s["zs_text_features_per_template"], m.per_template, 1e-5)
    check("step zs_text_features (template mean)", s["zs_text_features"], m.zt_raw, 1e-5)
    zi = m.zero_shot_image(images)
    check("step zs_image_features", s["zs_image_features"], zi, 1e-5)
    with torch.no_grad():
        fi, ft = m.image(p0, images), m.text(p0)
        loss, parts = m.loss(fi, ft, zi, labels)
    check("step image_features", s["image_features"], fi, 1e-5)
    check("step text_features", s["text_features"], ft, 1e-5)
    for k, v in parts.items():
        check(f"step {k}", s[k], v, 1e-5)
    check("step loss", s["loss"], loss, 1e-5)
    _, g = m.grads(p0, images, labels)
    fd_spot_check(m, {k: v.clone() for k, v in p0.items()}, images, labels, g, check)
    for k, v in g.items():
        check("step grad." + k, s["grad." + k], v, 1e-4)
    q = dict(p0)
    sgd_step(q, g, float(meta["lr"]), {}, float(meta["weight_decay"]), float(meta["momentum"]))
    for k in q:
        check(f"step step1.{k} (update)", s["step1." + k] - init[k], q[k] - p0[k], 1e-4, s["step1." + k])
    wd = max(float((float(meta["lr"]) * float(meta["weight_decay"]) * p0[k]).abs().max() / (q[k] - p0[k]).abs().max())
             for k in q)
    print(f"     step: weight decay's part of the step's updates ≤ {wd:.1e} of the update (below the tolerance: "
          "these fixtures do not see weight decay)")


def train(m, q, ims, lbs, bs, lr, meta, buf, losses):
    for b in range(0, len(ims), bs):
        loss, g = m.grads(q, ims[b:b + bs], lbs[b:b + bs])
        losses.append(loss)
        sgd_step(q, g, lr, buf, float(meta["weight_decay"]), float(meta["momentum"]))


def verify_gpa(m, p0, init, d, check):
    r, meta = st.load(os.path.join(d, "gpa.safetensors"))
    E = int(meta["max_epoch"])
    wts = gauss_weights(range(1, E + 1), float(meta["gpa_mean"]), float(meta["gpa_std"]))
    check("gpa gpa_weights", r["gpa_weights"], wts, 1e-6)
    q = dict(p0)
    buf, losses, epochs = {}, [], []
    ims, lbs = t64(r["images"]), r["labels"]
    for e in range(E):
        train(m, q, ims, lbs, int(meta["batch_size"]), float(meta["lr"]), meta, buf, losses)
        epochs.append(dict(q))
        for k in q:
            check(f"gpa epoch{e}.{k} (update)", r[f"epoch{e}.{k}"] - init[k], q[k] - p0[k], 1e-4, r[f"epoch{e}.{k}"])
    check("gpa batch_losses", r["batch_losses"], np.array(losses), 1e-5)
    for k in q:
        avg = sum(wt * ep[k] for wt, ep in zip(wts, epochs))
        check(f"gpa gpa.{k} (update)", r["gpa." + k] - init[k], avg - p0[k], 1e-4, r["gpa." + k])
        # the aggregate differs from the last epoch's state by far more than the tolerance
        gap = rel(epochs[-1][k] - p0[k], avg - p0[k])
        print(f"     gpa.{k}: the last epoch's update differs from the GPA update by {gap:.2f} (relative)")
        if gap < 1e-2:
            raise SystemExit(f"gpa.{k}: the fixture cannot tell GPA from the last epoch")


def verify_round(m, p0, init, d, check):
    r, rm = st.load(os.path.join(d, "round.safetensors"))
    sizes = [int(x) for x in rm["client_sizes"].strip("[]").split(",")]
    bs, lr = int(rm["batch_size"]), float(rm["lr"])
    trained = []
    for c in range(len(sizes)):
        q, losses = dict(p0), []
        ims, lbs = t64(r[f"client{c}.images"]), r[f"client{c}.labels"]
        for _ in range(int(rm["local_epochs"])):
            train(m, q, ims, lbs, bs, lr, rm, {}, losses)
        check(f"client{c}.batch_losses", r[f"client{c}.batch_losses"], np.array(losses), 1e-5)
        for k in q:
            check(f"client{c}.trained.{k} (update)", r[f"client{c}.trained.{k}"] - init[k], q[k] - p0[k], 1e-4,
                  r[f"client{c}.trained.{k}"])
        trained.append(q)
    n = sum(sizes)
    R = int(rm["flip_gpa_rounds"])
    g = gauss_weights(range(0, R + 1), float(rm["flip_gpa_mean"]), float(rm["flip_gpa_std"]))
    check("round flip_gpa_weights", r["flip_gpa_weights"], g, 1e-6)
    # FLiP's own constants (μ 15, σ 1) over R = 50 rounds: how much weight the partial sum holds
    gf = gauss_weights(range(0, 51), 15.0, 1.0)
    cum = np.cumsum(gf)
    print(f"     FLiP GPA, mu 15, sigma 1, R 50: weight of round 0 {gf[0]:.1e}; weight summed through "
          f"round 10 {cum[10]:.1e}, 12 {cum[12]:.1e}, 13 {cum[13]:.1e}, 15 {cum[15]:.2f}")
    for k in trained[0]:
        avg = sum(t[k] * (ni / n) for t, ni in zip(trained, sizes))
        check(f"global.{k} (update)", r["global." + k] - init[k], avg - p0[k], 1e-4, r["global." + k])
        check(f"global_gpa.{k}", r["global_gpa." + k], g[0] * avg, 1e-4)


if __name__ == "__main__":
    main()
