"""Checks testdata/kgcoop against an independent float64 numpy KgCoOp: forward
intermediates (template features, cos, score, CE), gradients by central
differences in every context coordinate, one SGD step, and the round."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402
import npclip as N  # noqa: E402

D = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "kgcoop"))


_TF = {}


def forward(W, ctx, imf, tokens, tmpl, scale, w, eps=1e-7):
    emb = N.embed(W, tokens)
    n = ctx.shape[0]
    emb[:, 1:1 + n] = ctx
    txt = N.encode_embedded(W, emb, tokens.argmax(-1))
    key = tmpl.tobytes()
    if key not in _TF:  # the hand-crafted prompts' features: frozen
        _TF[key] = N.normalize(N.encode_embedded(W, N.embed(W, tmpl), tmpl.argmax(-1)))
    tf = _TF[key]
    tn = N.normalize(txt)
    logits = scale * N.normalize(imf) @ tn.T
    cos = (tn * tf).sum(-1) / np.maximum(np.linalg.norm(tn, axis=-1) * np.linalg.norm(tf, axis=-1), eps)
    score = 1 - cos.mean()
    return txt, tf, cos, score, logits


def check_step(ck, W, name, pname):
    init, _ = C.read_st(os.path.join(D, pname))
    st, meta = C.read_st(os.path.join(D, name))
    scale, w = np.exp(float(meta["logit_scale"])), float(meta["w"])
    lr, mom, wd = float(meta["lr"]), float(meta["momentum"]), float(meta["weight_decay"])
    P0 = {"ctx": init["prompt_learner.ctx"].double().numpy()}
    tokens, tmpl = st["tokens"].numpy(), st["template_tokens"].numpy()
    imf = N.encode_image(W, st["images"].double().numpy())
    labels = st["labels"].numpy()
    txt, tf, cos, score, logits = forward(W, P0["ctx"], imf, tokens, tmpl, scale, w)
    print(name + ":")
    for k, v in [("image_features", imf), ("text_features", txt), ("template_features", tf), ("cos", cos), ("logits", logits)]:
        ck.check(k, v, st[k], 1e-5)
    ce = N.cross_entropy(logits, labels)
    ck.check("loss_ce", ce, st["loss_ce"], 1e-5)
    # score = 1 − mean cos cancels in float32: an absolute 1e-6 (at init it is 0)
    ck.check("score (abs 1e-6)", score, st["score"], max(1e-5, 1e-6 / max(abs(float(st["score"])), 1e-30)))
    loss = lambda P: (lambda o: N.cross_entropy(o[4], labels) + w * o[3])(forward(W, P["ctx"], imf, tokens, tmpl, scale, w))  # noqa: E731
    ck.check("loss", loss(P0), st["loss"], 1e-5)
    g = N.fd_grad(loss, {k: v.copy() for k, v in P0.items()})
    P1 = {k: v.copy() for k, v in P0.items()}
    N.sgd(P1, g, {}, lr, mom, wd)
    ck.check("grad.prompt_learner.ctx", g["ctx"], st["grad.prompt_learner.ctx"], 1e-4)
    ck.check("step1.prompt_learner.ctx", P1["ctx"], st["step1.prompt_learner.ctx"], 1e-4)
    ck.check("step1 update", P1["ctx"] - P0["ctx"], st["step1.prompt_learner.ctx"].double().numpy() - P0["ctx"], 1e-4)


def main():
    W = N.load()
    ck = N.Checker("kgcoop")
    check_step(ck, W, "step.safetensors", "init.safetensors")
    check_step(ck, W, "step_rand.safetensors", "init_rand.safetensors")
    rd, rm = C.read_st(os.path.join(D, "round.safetensors"))
    init, _ = C.read_st(os.path.join(D, rm["params"]))
    scale, w = np.exp(float(rm["logit_scale"])), float(rm["w"])
    lr, mom, wd, bs = float(rm["lr"]), float(rm["momentum"]), float(rm["weight_decay"]), int(rm["batch_size"])
    tokens, tmpl = rd["tokens"].numpy(), rd["template_tokens"].numpy()
    P0 = {"ctx": init["prompt_learner.ctx"].double().numpy()}
    print("round:")
    trained, sizes = [], []
    for ci in range(2):
        P, bufs, losses = {k: v.copy() for k, v in P0.items()}, {}, []
        imgs = N.encode_image(W, rd[f"client{ci}.images"].double().numpy())
        lab = rd[f"client{ci}.labels"].numpy()
        for b in range(0, len(lab), bs):
            fb = lambda Q: (lambda o: N.cross_entropy(o[4], lab[b:b + bs]) + w * o[3])(forward(W, Q["ctx"], imgs[b:b + bs], tokens, tmpl, scale, w))  # noqa: E731
            losses.append(fb(P))
            N.sgd(P, N.fd_grad(fb, P), bufs, lr, mom, wd)
        ck.check(f"client{ci}.batch_losses", losses, rd[f"client{ci}.batch_losses"], 1e-5)
        ref = rd[f"client{ci}.trained.prompt_learner.ctx"].double().numpy()
        ck.check(f"client{ci}.trained", P["ctx"], ref, 1e-4)
        ck.check(f"client{ci}.trained update", P["ctx"] - P0["ctx"], ref - P0["ctx"], 1e-4)
        trained.append(P["ctx"])
        sizes.append(len(lab))
    gl = sum(trained[i] * sizes[i] / sum(sizes) for i in range(2))
    ref = rd["global.prompt_learner.ctx"].double().numpy()
    ck.check("global", gl, ref, 1e-4)
    ck.check("global update", gl - P0["ctx"], ref - P0["ctx"], 1e-4)
    ck.done()


if __name__ == "__main__":
    main()
