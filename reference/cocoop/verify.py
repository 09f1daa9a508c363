"""Checks testdata/cocoop against an independent float64 numpy CoCoOp:
forward intermediates; gradients: the loss is a mean over images of terms
that each depend on one image's shifted context only, so ∂L/∂ctx_shifted[b]
is taken by central differences in all n_ctx·D coordinates of every image,
then chained by hand through ctx_shifted = ctx + meta_net(Î) (a numpy
backward of the two linears and the ReLU), and that chain is itself checked
by central differences of the whole loss in 24 random coordinates of every
tensor; one SGD step, and the round (every batch's gradient the same way,
FedAvg n_i/n)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402
import npclip as N  # noqa: E402

D = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "cocoop"))


def f64(d):
    return {k: v.double().numpy().copy() for k, v in d.items()}


def forward(W, P, imf, tokens, n_ctx, scale):
    """CoCoOp on raw image features imf [B, E]: returns bias, text features
    [B, C, E] (raw) and logits [B, C]."""
    imn = N.normalize(imf)
    h = np.maximum(imn @ P["prompt_learner.meta_net.linear1.weight"].T + P["prompt_learner.meta_net.linear1.bias"], 0)
    bias = h @ P["prompt_learner.meta_net.linear2.weight"].T + P["prompt_learner.meta_net.linear2.bias"]  # [B, D]
    B, Cn = len(imf), len(tokens)
    emb = np.repeat(N.embed(W, tokens)[None], B, 0)  # [B, C, 77, D]
    emb[:, :, 1:1 + n_ctx] = P["prompt_learner.ctx"][None, None] + bias[:, None, None]
    eot = np.tile(tokens.argmax(-1), B)
    txt = N.encode_embedded(W, emb.reshape(B * Cn, *emb.shape[2:]), eot).reshape(B, Cn, -1)
    logits = scale * np.einsum("be,bce->bc", imn, N.normalize(txt))
    return bias, txt, logits


def grads(W, P, imf, labels, tokens, n_ctx, scale):
    """∂L/∂p of every prompt-learner tensor (see the module doc)."""
    imn = N.normalize(imf)
    W1, b1 = P["prompt_learner.meta_net.linear1.weight"], P["prompt_learner.meta_net.linear1.bias"]
    W2, b2 = P["prompt_learner.meta_net.linear2.weight"], P["prompt_learner.meta_net.linear2.bias"]
    h = np.maximum(imn @ W1.T + b1, 0)
    bias = h @ W2.T + b2
    B = len(imf)
    emb0 = N.embed(W, tokens)
    eot = tokens.argmax(-1)
    dS = np.zeros((B, n_ctx, bias.shape[1]))
    for b in range(B):
        def ce_b(Q):
            emb = emb0.copy()
            emb[:, 1:1 + n_ctx] = Q["s"]
            lg = scale * N.normalize(N.encode_embedded(W, emb, eot)) @ imn[b]
            return N.cross_entropy(lg[None], labels[b:b + 1]) / B
        dS[b] = N.fd_grad(ce_b, {"s": P["prompt_learner.ctx"] + bias[b]})["s"]
    dbias = dS.sum(1)
    dh = (dbias @ W2) * (h > 0)
    return {"prompt_learner.ctx": dS.sum(0), "prompt_learner.meta_net.linear2.weight": dbias.T @ h,
            "prompt_learner.meta_net.linear2.bias": dbias.sum(0), "prompt_learner.meta_net.linear1.weight": dh.T @ imn,
            "prompt_learner.meta_net.linear1.bias": dh.sum(0)}


def spot_check(ck, loss, P, g, rng, k=24, h=1e-5):
    """Central differences of the whole loss in k random coordinates of
    every tensor against the chained gradient g."""
    for name, v in P.items():
        idx = rng.choice(v.size, size=min(k, v.size), replace=False)
        fd, an = [], []
        for i in idx:
            flat = v.reshape(-1)
            o = flat[i]
            flat[i] = o + h
            a = loss(P)
            flat[i] = o - h
            b = loss(P)
            flat[i] = o
            fd.append((a - b) / (2 * h))
            an.append(g[name].reshape(-1)[i])
        ck.check("chain vs whole-loss differences " + name, an, fd, 1e-5)


def main():
    W = N.load()
    init, im = C.read_st(os.path.join(D, "init.safetensors"))
    st, meta = C.read_st(os.path.join(D, "step.safetensors"))
    n_ctx, scale = int(meta["n_ctx"]), np.exp(float(meta["logit_scale"]))
    lr, mom, wd = float(meta["lr"]), float(meta["momentum"]), float(meta["weight_decay"])
    P0 = f64(init)
    tokens = st["tokens"].numpy()
    ck = N.Checker("cocoop")
    print("step:")
    imf = N.encode_image(W, st["images"].double().numpy())
    labels = st["labels"].numpy()
    bias, txt, logits = forward(W, P0, imf, tokens, n_ctx, scale)
    ck.check("image_features", imf, st["image_features"], 1e-5)
    ck.check("meta_bias", bias, st["meta_bias"], 1e-5)
    ck.check("ctx_shifted", P0["prompt_learner.ctx"][None] + bias[:, None], st["ctx_shifted"], 1e-5)
    ck.check("text_features", txt, st["text_features"], 1e-5)
    ck.check("logits", logits, st["logits"], 1e-5)
    loss = lambda P: N.cross_entropy(forward(W, P, imf, tokens, n_ctx, scale)[2], labels)  # noqa: E731
    ck.check("loss", loss(P0), st["loss"], 1e-5)
    g = grads(W, P0, imf, labels, tokens, n_ctx, scale)
    spot_check(ck, loss, {k: v.copy() for k, v in P0.items()}, g, np.random.default_rng(0))
    P1 = {k: v.copy() for k, v in P0.items()}
    N.sgd(P1, g, {}, lr, mom, wd)
    for k in P0:
        ck.check("grad." + k, g[k], st["grad." + k], 1e-4)
        ck.check("step1." + k, P1[k], st["step1." + k], 1e-4)
        upd_ref = st["step1." + k].double().numpy() - P0[k]
        tol = 1e-4 + np.spacing(np.float32(np.abs(P1[k]).max())) / np.abs(upd_ref).max()
        ck.check("step1 update " + k, P1[k] - P0[k], upd_ref, tol)

    rd, rm = C.read_st(os.path.join(D, "round.safetensors"))
    lr, bs = float(rm["lr"]), int(rm["batch_size"])
    print("round:")
    trained, sizes = [], []
    for ci in range(2):
        P = {k: v.copy() for k, v in P0.items()}
        bufs, losses = {}, []
        imgs = N.encode_image(W, rd[f"client{ci}.images"].double().numpy())
        lab = rd[f"client{ci}.labels"].numpy()
        nsteps = 0
        for b in range(0, len(lab), bs):
            fb = lambda Q: N.cross_entropy(forward(W, Q, imgs[b:b + bs], tokens, n_ctx, scale)[2], lab[b:b + bs])  # noqa: E731
            losses.append(fb(P))
            g = grads(W, P, imgs[b:b + bs], lab[b:b + bs], tokens, n_ctx, scale)
            N.sgd(P, g, bufs, lr, mom, wd)
            nsteps += 1
        ck.check(f"client{ci}.batch_losses", losses, rd[f"client{ci}.batch_losses"], 1e-5)
        for k in P0:
            ref = rd[f"client{ci}.trained.{k}"].double().numpy()
            ck.check(f"client{ci}.trained.{k}", P[k], ref, 1e-4)
            tol = 1e-4 + nsteps * np.spacing(np.float32(np.abs(ref).max())) / np.abs(ref - P0[k]).max()
            ck.check(f"client{ci}.trained update {k}", P[k] - P0[k], ref - P0[k], tol)
        trained.append(P)
        sizes.append(len(lab))
    for k in P0:
        gl = sum(trained[i][k] * sizes[i] / sum(sizes) for i in range(2))
        ref = rd["global." + k].double().numpy()
        ck.check("global." + k, gl, ref, 1e-4)
        tol = 1e-4 + 3 * np.spacing(np.float32(np.abs(ref).max())) / np.abs(ref - P0[k]).max()
        ck.check("global update " + k, gl - P0[k], ref - P0[k], tol)
    ck.done()


if __name__ == "__main__":
    main()
