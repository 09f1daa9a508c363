"""Checks testdata/fedmvp against an independent float64 numpy FedMVP (it shares
no code with the authors' modules or the generator): every forward intermediate
(description features, textfeat_ctx, the pooled visual prompts, prompted and
zero-shot image features, logits, CE, vis_score, loss), the gradients by central
differences at sampled coordinates of every trained tensor (plus each tensor's
largest), one SGD step, and the round (each client's update is one SGD step on
its whole batch; the global tensors the uniform mean)."""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402
import npclip as N  # noqa: E402

D = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "fedmvp"))
PL = "prompt_learner."
CA = PL + "crossattn.cross_attend_blocks."
ERF = np.frompyfunc(math.erf, 1, 1)


def gelu(x):
    return 0.5 * x * (1 + ERF(x / math.sqrt(2)).astype(np.float64))


def ln(x, w, b):
    return N.ln(x, w, b)


def lora(x, P, which, on):
    if not on:
        return x
    return x + x @ P[PL + f"cross_loraparams.cross_{which}A"] @ P[PL + f"cross_loraparams.cross_{which}B"]


def prompt_former(P, xpatch, text, heads, K, on):
    """xpatch [B, Pn, Dv], text [N, E] -> (ctx [N, Dv], vis [B, K, Dv])."""
    B, Pn, Dv = xpatch.shape
    ctx = text @ P[PL + "linear.weight"].T + P[PL + "linear.bias"]
    qn = ln(lora(xpatch, P, "query", on), P[CA + "0.norm.weight"], P[CA + "0.norm.bias"])
    kn = ln(lora(ctx, P, "key", on), P[CA + "0.norm_context.weight"], P[CA + "0.norm_context.bias"])
    v_in = lora(ctx, P, "value", on)
    W, b = P[CA + "0.fn.in_proj_weight"], P[CA + "0.fn.in_proj_bias"]
    q = qn @ W[:Dv].T + b[:Dv]
    k = kn @ W[Dv:2 * Dv].T + b[Dv:2 * Dv]
    v = v_in @ W[2 * Dv:].T + b[2 * Dv:]
    hd = Dv // heads
    qh = q.reshape(B, Pn, heads, hd).transpose(0, 2, 1, 3)
    kh = k.reshape(-1, heads, hd).transpose(1, 0, 2)
    vh = v.reshape(-1, heads, hd).transpose(1, 0, 2)
    s = qh @ kh.transpose(0, 2, 1)[None] / math.sqrt(hd)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    att = (s @ vh[None]).transpose(0, 2, 1, 3).reshape(B, Pn, Dv)
    a = att @ P[CA + "0.fn.out_proj.weight"].T + P[CA + "0.fn.out_proj.bias"]
    u = ln(a, P[CA + "1.net.0.weight"], P[CA + "1.net.0.bias"]) @ P[CA + "1.net.1.weight"].T + P[CA + "1.net.1.bias"]
    F = u.shape[-1] // 2
    y = (u[..., :F] * gelu(u[..., F:])) @ P[CA + "1.net.3.weight"].T + P[CA + "1.net.3.bias"] + a
    vis = np.stack([y[:, (i * Pn) // K:-((-(i + 1) * Pn) // K)].mean(1) for i in range(K)], 1)
    return ctx, vis


def embeddings(W, img):
    w = W["visual.conv1.weight"]
    p = w.shape[-1]
    B, _, S, _ = img.shape
    g = S // p
    patches = img.reshape(B, 3, g, p, g, p).transpose(0, 2, 4, 1, 3, 5).reshape(B, g * g, 3 * p * p)
    x = patches @ w.reshape(w.shape[0], -1).T
    cls = np.broadcast_to(W["visual.class_embedding"], (B, 1, x.shape[-1]))
    return np.concatenate([cls, x], 1) + W["visual.positional_embedding"]


def forward(W, P, img, text, classes, labels, flip, meta, on):
    heads, K, alpha = int(meta["heads"]), int(meta["prompts"]), float(meta["alpha"])
    x = embeddings(W, img)
    ctx, vis = prompt_former(P, x[:, 1:], text, heads, K, on)
    h = ln(np.concatenate([x, vis], 1), W["visual.ln_pre.weight"], W["visual.ln_pre.bias"])
    for i in N.layers(W, "visual.transformer.resblocks."):
        h = N.block(W, f"visual.transformer.resblocks.{i}.", h, False)
    f = N.normalize(ln(h[:, 0], W["visual.ln_post.weight"], W["visual.ln_post.bias"]) @ W["visual.proj"])
    z = N.normalize(N.encode_image(W, img[..., ::-1] if flip else img))
    emb = np.stack([text[classes == c].mean(0) for c in range(classes.max() + 1)])
    logits = math.exp(float(meta["logit_scale"])) * f @ emb.T
    ce = N.cross_entropy(logits, labels)
    vis_score = 1 - float((f * z).sum(-1).mean())
    return {"textfeat_ctx": ctx, "vis_ctx": vis, "image_features": f, "zs_features": z, "logits": logits,
            "ce": ce, "vis_score": vis_score, "loss": ce + alpha * vis_score}


def fd_at(loss, P, name, idx, h=1e-5):
    flat = P[name].reshape(-1)
    o = flat[idx]
    flat[idx] = o + h
    a = loss(P)
    flat[idx] = o - h
    b = loss(P)
    flat[idx] = o
    return (a - b) / (2 * h)


def check_grads(ck, loss, P, grads, rng, label, slack=None):
    """FD at 4 random coordinates and the largest-|g| one of every tensor;
    the error is relative to the tensor's max|g| (plus slack[name], the
    float32 rounding of a gradient read back from an update). A tensor's
    max|g| is floored at 1e-3 of the largest over all tensors: β of the keys'
    LayerNorm (norm_context.bias) shifts every key alike, softmax ignores it,
    and its gradient is 0 up to rounding."""
    floor = 1e-3 * max(np.abs(g).max() for g in grads.values())
    for name in sorted(grads):
        g = grads[name].reshape(-1)
        idx = list(rng.choice(g.size, size=min(4, g.size), replace=False)) + [int(np.abs(g).argmax())]
        fd = np.array([fd_at(loss, P, name, i) for i in idx])
        gmax = max(np.abs(g).max(), floor)
        tol = 1e-4 + (slack or {}).get(name, 0.0) / gmax
        ck.check_abs(f"{label}{name} (FD at {len(idx)} coordinates, rel. to max|g|)", np.abs(fd - g[idx]).max() / gmax, tol)


class Checker(N.Checker):
    def check_abs(self, what, err, tol):
        self.worst = max(self.worst, err / tol)
        ok = err <= tol
        if not ok:
            self.fail += 1
        print(f"  {'ok ' if ok else 'BAD'} {what}: {err:.2e} (tol {tol:.0e})")


def text_features(W, desc_tokens):
    return N.normalize(N.encode_embedded(W, N.embed(W, desc_tokens), desc_tokens.argmax(-1)))


def check_step(ck, W, name, rng):
    st, meta = C.read_st(os.path.join(D, name))
    init, _ = C.read_st(os.path.join(D, meta["params"]))
    P = {k: v.double().numpy() for k, v in init.items()}
    on, flip = meta["lora"] == "1", float(meta["flip_prob"]) >= 1
    img, labels = st["images"].double().numpy(), st["labels"].numpy()
    text, classes = text_features(W, st["desc_tokens"].numpy()), st["desc_class"].numpy()
    print(name + ":")
    ck.check("text_features", text, st["text_features"], 1e-5)
    out = forward(W, P, img, text, classes, labels, flip, meta, on)
    for k in ["textfeat_ctx", "vis_ctx", "image_features", "zs_features", "logits", "ce", "vis_score", "loss"]:
        ck.check(k, out[k], st[k], 1e-5)
    loss = lambda Q: forward(W, Q, img, text, classes, labels, flip, meta, on)["loss"]  # noqa: E731
    grads = {k[5:]: v.double().numpy() for k, v in st.items() if k.startswith("grad.")}
    trained = {k for k in P if not k.startswith(PL + ("crossattn." if on else "cross_loraparams."))}
    trained.discard(PL + "crossattn.cross_attend_blocks.0.norm_context.bias")  # gradient 0: not stored
    ck.check_abs("trained tensors are " + ("linear + LoRA" if on else "linear + cross-attention"), float(set(grads) != trained), 0.5)
    check_grads(ck, loss, P, grads, rng, "grad.")
    lr, wd = float(meta["lr"]), float(meta["weight_decay"])
    for k, g in grads.items():
        p1 = P[k] - lr * (g + wd * P[k])  # a fresh SGD: buf = d
        ck.check("step1." + k, p1, st["step1." + k], 1e-5)


def check_round(ck, W, rng):
    st, meta = C.read_st(os.path.join(D, "round.safetensors"))
    init, _ = C.read_st(os.path.join(D, meta["params"]))
    P = {k: v.double().numpy() for k, v in init.items()}
    text, classes = text_features(W, st["desc_tokens"].numpy()), st["desc_class"].numpy()
    lr, wd, flip = float(meta["lr"]), float(meta["weight_decay"]), float(meta["flip_prob"]) >= 1
    print("round.safetensors:")
    trained = []
    for ci in range(2):
        img, labels = st[f"client{ci}.images"].double().numpy(), st[f"client{ci}.labels"].numpy()
        loss = lambda Q: forward(W, Q, img, text, classes, labels, flip, meta, False)["loss"]  # noqa: E731
        ck.check(f"client{ci}.batch_losses", loss(P), st[f"client{ci}.batch_losses"], 1e-5)
        t = {k[len(f"client{ci}.trained."):]: v.double().numpy() for k, v in st.items() if k.startswith(f"client{ci}.trained.")}
        # one SGD step: the gradient the update implies, checked by FD
        g = {k: (P[k] - v) / lr - wd * P[k] for k, v in t.items()}
        slack = {k: 2 * np.abs(v).max() * 2.0 ** -23 / lr for k, v in t.items()}
        check_grads(ck, loss, P, g, rng, f"client{ci} implied grad ", slack)
        trained.append(t)
    for k in trained[0]:
        ck.check("global." + k + " = uniform mean", (trained[0][k] + trained[1][k]) / 2, st["global." + k], 1e-6)


def main():
    W = N.load()
    rng = np.random.default_rng(7)
    ck = Checker("fedmvp")
    check_step(ck, W, "step.safetensors", rng)
    check_step(ck, W, "step_lora.safetensors", rng)
    check_round(ck, W, rng)
    ck.done()


if __name__ == "__main__":
    main()
