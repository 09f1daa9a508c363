"""Independent float64 numpy check of the MaPLe fixtures (no torch).

Re-implements the tiny CLIP with MaPLe's prompts from the weights and the settings in the
fixture metadata, then checks features, logits and loss, and every gradient: central finite
differences of the float64 loss with respect to every entry of the text-side inputs (ctx and
the deep text prompts, through the text encoder) and of the visual prompts (through the
image encoder); the coupling's gradients follow from the chain rule of its linear maps
(dW = gᵀx, db = Σg, and the text prompt also receives g·W). Then one SGD step, and the
round (two clients' local epochs with finite-difference gradients, then FedAvg).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import st  # noqa: E402

P = "prompt_learner."


def ln(x, w, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * w + b


class Clip:
    def __init__(self, w, heads=2):
        self.w = {k: v.astype(np.float64) for k, v in w.items()}
        self.h = heads

    def block(self, pre, x, mask):
        w = self.w
        d = x.shape[-1]
        y = ln(x, w[pre + "ln_1.weight"], w[pre + "ln_1.bias"])
        qkv = y @ w[pre + "attn.in_proj_weight"].T + w[pre + "attn.in_proj_bias"]
        q, k, v = np.split(qkv, 3, axis=-1)
        B, L, _ = x.shape
        dh = d // self.h
        q = q.reshape(B, L, self.h, dh).transpose(0, 2, 1, 3) / np.sqrt(dh)
        k = k.reshape(B, L, self.h, dh).transpose(0, 2, 1, 3)
        v = v.reshape(B, L, self.h, dh).transpose(0, 2, 1, 3)
        s = q @ k.transpose(0, 1, 3, 2)
        if mask is not None:
            s = s + mask
        s = s - s.max(-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(0, 2, 1, 3).reshape(B, L, d)
        x = x + o @ w[pre + "attn.out_proj.weight"].T + w[pre + "attn.out_proj.bias"]
        y = ln(x, w[pre + "ln_2.weight"], w[pre + "ln_2.bias"])
        y = y @ w[pre + "mlp.c_fc.weight"].T + w[pre + "mlp.c_fc.bias"]
        y = y / (1 + np.exp(-1.702 * y))
        return x + y @ w[pre + "mlp.c_proj.weight"].T + w[pre + "mlp.c_proj.bias"]

    def layers(self, pre):
        return len({k.split(".")[len(pre.split(".")) - 1] for k in self.w if k.startswith(pre)})

    def image(self, images, vprompts):
        """vprompts[0]: appended before ln_pre; vprompts[i], i ≥ 1: replace the last n_ctx
        tokens at the input of block i."""
        w = self.w
        B = images.shape[0]
        cw = w["visual.conv1.weight"]
        p = cw.shape[-1]
        g = images.shape[-1] // p
        patches = images.reshape(B, 3, g, p, g, p).transpose(0, 2, 4, 1, 3, 5).reshape(B, g * g, -1)
        x = patches @ cw.reshape(cw.shape[0], -1).T
        cls = np.broadcast_to(w["visual.class_embedding"], (B, 1, x.shape[-1]))
        x = np.concatenate([cls, x], 1) + w["visual.positional_embedding"]
        n = vprompts[0].shape[0]
        x = np.concatenate([x, np.broadcast_to(vprompts[0], (B, n, x.shape[-1]))], 1)
        x = ln(x, w["visual.ln_pre.weight"], w["visual.ln_pre.bias"])
        for i in range(self.layers("visual.transformer.resblocks.")):
            if 1 <= i < len(vprompts):
                x = np.concatenate([x[:, :-n], np.broadcast_to(vprompts[i], (B, n, x.shape[-1]))], 1)
            x = self.block(f"visual.transformer.resblocks.{i}.", x, None)
        return ln(x[:, 0], w["visual.ln_post.weight"], w["visual.ln_post.bias"]) @ w["visual.proj"]

    def text(self, tokens, tprompts):
        """tprompts[0] = ctx replaces positions 1..n_ctx of the embedding; tprompts[i],
        i ≥ 1, replace those positions at the input of block i."""
        w = self.w
        C, L = tokens.shape
        n = tprompts[0].shape[0]
        x = w["token_embedding.weight"][tokens].copy()
        x[:, 1:1 + n] = tprompts[0]
        x = x + w["positional_embedding"]
        mask = np.triu(np.full((L, L), -np.inf), 1)
        for i in range(self.layers("transformer.resblocks.")):
            if 1 <= i < len(tprompts):
                x = x.copy()
                x[:, 1:1 + n] = tprompts[i]
            x = self.block(f"transformer.resblocks.{i}.", x, mask)
        x = ln(x, w["ln_final.weight"], w["ln_final.bias"])
        return x[np.arange(C), tokens.argmax(-1)] @ w["text_projection"]


def lin(x, W, b):
    return x @ W.T + b


def prompts(p, depth):
    tp = [p[P + "ctx"]] + [p[P + f"compound_prompts_text.{k}"] for k in range(depth - 1)]
    vp = [lin(p[P + "ctx"], p[P + "proj.weight"], p[P + "proj.bias"])]
    for k in range(depth - 1):
        vp.append(lin(tp[k + 1], p[P + f"compound_prompt_projections.{k}.weight"],
                      p[P + f"compound_prompt_projections.{k}.bias"]))
    return tp, vp


def loss_of(fi, ft, labels, scale):
    fi = fi / np.linalg.norm(fi, axis=-1, keepdims=True)
    ft = ft / np.linalg.norm(ft, axis=-1, keepdims=True)
    lg = np.exp(scale) * fi @ ft.T
    m = lg.max(-1, keepdims=True)
    lse = np.log(np.exp(lg - m).sum(-1)) + m[:, 0]
    return lg, float(np.mean(lse - lg[np.arange(len(labels)), labels]))


def fd(f, xs, h=1e-6):
    """Central differences of scalar f(list of arrays) for every entry of every array."""
    gs = []
    for a in xs:
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            o = a[idx]
            a[idx] = o + h
            fp = f()
            a[idx] = o - h
            fm = f()
            a[idx] = o
            g[idx] = (fp - fm) / (2 * h)
        gs.append(g)
    return gs


def grads(clip, p, depth, images, labels, tokens, scale):
    tp, vp = prompts(p, depth)
    fi = clip.image(images, vp)
    ft = clip.text(tokens, tp)
    gt = fd(lambda: loss_of(fi, clip.text(tokens, tp), labels, scale)[1], tp)
    gv = fd(lambda: loss_of(clip.image(images, vp), ft, labels, scale)[1], vp)
    g = {P + "ctx": gt[0] + gv[0] @ p[P + "proj.weight"],
         P + "proj.weight": gv[0].T @ p[P + "ctx"], P + "proj.bias": gv[0].sum(0)}
    for k in range(depth - 1):
        W = p[P + f"compound_prompt_projections.{k}.weight"]
        g[P + f"compound_prompts_text.{k}"] = gt[k + 1] + gv[k + 1] @ W
        g[P + f"compound_prompt_projections.{k}.weight"] = gv[k + 1].T @ tp[k + 1]
        g[P + f"compound_prompt_projections.{k}.bias"] = gv[k + 1].sum(0)
    return g


def sgd_step(p, g, lr, mom_buf, wd=5e-4, mom=0.9):
    for k in p:
        d = g[k] + wd * p[k]
        if k in mom_buf:
            mom_buf[k] = mom * mom_buf[k] + d
        else:
            mom_buf[k] = d.copy()
        p[k] = p[k] - lr * mom_buf[k]


def rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--testdata", required=True)
    a = ap.parse_args()
    w, _ = st.load(os.path.join(a.testdata, "clip-tiny", "openai.safetensors"))
    clip = Clip(w)
    scale = float(w["logit_scale"].reshape(()))
    d = os.path.join(a.testdata, "maple")
    worst = {}

    def check(name, got, want, tol):
        r = rel(got, want)
        worst[name] = r / tol
        status = "ok" if r <= tol else "FAIL"
        print(f"{status:4s} {name:60s} rel {r:.2e} (tol {tol:.0e})")
        if r > tol:
            raise SystemExit(1)

    for sfx in ["_j4", ""]:
        init, _ = st.load(os.path.join(d, f"init{sfx}.safetensors"))
        verify_step(clip, scale, init, *st.load(os.path.join(d, f"step{sfx}.safetensors")), check, sfx)
    init, _ = st.load(os.path.join(d, "init.safetensors"))
    depth = int(st.load(os.path.join(d, "step.safetensors"))[1]["prompt_depth"])
    verify_round(clip, scale, init, depth, d, check)
    k = max(worst, key=worst.get)
    print(f"all checks pass; worst {k}: {worst[k]:.2f} of its tolerance")


def verify_step(clip, scale, init, s, meta, check, sfx):
    depth = int(meta["prompt_depth"])
    p = {k: v.astype(np.float64) for k, v in init.items()}
    tp, vp = prompts(p, depth)
    for i, v in enumerate(vp):
        check(f"step{sfx} visual_prompt.{i}", s[f"visual_prompt.{i}"], v, 1e-5)
    images = s["images"].astype(np.float64)
    fi = clip.image(images, vp)
    ft = clip.text(s["tokens"], tp)
    check(f"step{sfx} image_features", s["image_features"], fi, 1e-4)
    check(f"step{sfx} text_features", s["text_features"], ft, 1e-4)
    lg, loss = loss_of(fi, ft, s["labels"], scale)
    check(f"step{sfx} logits", s["logits"], lg, 1e-4)
    check(f"step{sfx} loss", s["loss"], np.array([loss]), 1e-5)
    g = grads(clip, p, depth, images, s["labels"], s["tokens"], scale)
    for k, v in g.items():
        check(f"step{sfx} grad." + k, s["grad." + k], v, 1e-3)
    q = dict(p)
    sgd_step(q, g, float(meta["lr"]), {})
    for k in q:
        check(f"step{sfx} step1." + k + " (update)", s["step1." + k] - init[k], q[k] - p[k], 1e-3)


def verify_round(clip, scale, init, depth, d, check):
    r, rm = st.load(os.path.join(d, "round.safetensors"))
    sizes = [int(x) for x in rm["client_sizes"].strip("[]").split(",")]
    bs, lr = int(rm["batch_size"]), float(rm["lr"])
    trained = []
    for c in range(len(sizes)):
        q = {k: v.astype(np.float64) for k, v in init.items()}
        buf = {}
        ims = r[f"client{c}.images"].astype(np.float64)
        lbs = r[f"client{c}.labels"]
        for bi, b in enumerate(range(0, len(ims), bs)):
            tp, vp = prompts(q, depth)
            _, l = loss_of(clip.image(ims[b:b + bs], vp), clip.text(r["tokens"], tp), lbs[b:b + bs], scale)
            check(f"client{c}.batch_losses[{bi}]", r[f"client{c}.batch_losses"][bi:bi + 1], np.array([l]), 1e-4)
            gg = grads(clip, q, depth, ims[b:b + bs], lbs[b:b + bs], r["tokens"], scale)
            sgd_step(q, gg, lr, buf)
        for k in q:
            check(f"client{c}.trained.{k} (update)", r[f"client{c}.trained.{k}"] - init[k], q[k] - init[k], 2e-3)
        trained.append(q)
    n = sum(sizes)
    for k in trained[0]:
        avg = sum(t[k] * (ni / n) for t, ni in zip(trained, sizes))
        check(f"global.{k} (update)", r["global." + k] - init[k], avg - init[k], 2e-3)


if __name__ == "__main__":
    main()
