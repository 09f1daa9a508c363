"""Checks testdata/coop-positions against an independent float64 numpy CoOp
with the class token at the "middle" or "front": the prompt embeddings
(rearranged rows), text features, logits, loss, gradients by central
differences in every context coordinate, one SGD step and the round."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402
import npclip as N  # noqa: E402

D = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "coop-positions"))


def embed_prompts(W, ctx, tokens, pos, n):
    """Rows of "X…X name." with the context placed as CoOp's PromptLearner
    does: end [SOS ctx name . EOS], middle [SOS ctx[:n//2] name ctx[n//2:] .
    EOS], front [SOS name ctx . EOS]; ctx [n, D] or class-specific [C, n, D]."""
    emb = N.embed(W, tokens)
    out = emb.copy()
    for i, row in enumerate(tokens):
        c = ctx[i] if ctx.ndim == 3 else ctx
        L = int(row.argmax()) - 2 - n  # name tokens between the Xs and "."
        name = emb[i, 1 + n:1 + n + L]
        if pos == "end":
            seq = [c, name]
        elif pos == "middle":
            seq = [c[:n // 2], name, c[n // 2:]]
        else:
            seq = [name, c]
        out[i, 1:1 + n + L] = np.concatenate(seq, 0)
    return out


def forward(W, ctx, imf, tokens, pos, n, scale):
    emb = embed_prompts(W, ctx, tokens, pos, n)
    txt = N.encode_embedded(W, emb, tokens.argmax(-1))
    return emb, txt, scale * N.normalize(imf) @ N.normalize(txt).T


def check(ck, W, sub):
    d = os.path.join(D, sub)
    init, _ = C.read_st(os.path.join(d, "init.safetensors"))
    st, meta = C.read_st(os.path.join(d, "step.safetensors"))
    pos, n, scale = meta["class_token_position"], int(meta["n_ctx"]), np.exp(float(meta["logit_scale"]))
    lr, mom, wd = float(meta["lr"]), float(meta["momentum"]), float(meta["weight_decay"])
    tokens, labels = st["tokens"].numpy(), st["labels"].numpy()
    P0 = {"ctx": init["prompt_learner.ctx"].double().numpy()}
    imf = N.encode_image(W, st["images"].double().numpy())
    emb, txt, logits = forward(W, P0["ctx"], imf, tokens, pos, n, scale)
    print(sub + " step:")
    T = int(tokens.argmax(-1).max()) + 1
    ck.check("prompts (first T positions)", emb[:, :T], st["prompts"][:, :T], 1e-6)
    ck.check("text_features", txt, st["text_features"], 1e-5)
    ck.check("logits", logits, st["logits"], 1e-5)
    loss = lambda P: N.cross_entropy(forward(W, P["ctx"], imf, tokens, pos, n, scale)[2], labels)  # noqa: E731
    ck.check("loss", loss(P0), st["loss"], 1e-5)
    g = N.fd_grad(loss, {k: v.copy() for k, v in P0.items()})
    P1 = {k: v.copy() for k, v in P0.items()}
    N.sgd(P1, g, {}, lr, mom, wd)
    ck.check("grad", g["ctx"], st["grad.prompt_learner.ctx"], 1e-4)
    ck.check("step1", P1["ctx"], st["step1.prompt_learner.ctx"], 1e-4)
    ck.check("step1 update", P1["ctx"] - P0["ctx"], st["step1.prompt_learner.ctx"].double().numpy() - P0["ctx"], 1e-4)
    rd, rm = C.read_st(os.path.join(d, "round.safetensors"))
    lr, bs = float(rm["lr"]), int(rm["batch_size"])
    print(sub + " round:")
    trained, sizes = [], []
    for ci in range(2):
        P, bufs, losses = {k: v.copy() for k, v in P0.items()}, {}, []
        ims = N.encode_image(W, rd[f"client{ci}.images"].double().numpy())
        lab = rd[f"client{ci}.labels"].numpy()
        for b in range(0, len(lab), bs):
            fb = lambda Q: N.cross_entropy(forward(W, Q["ctx"], ims[b:b + bs], tokens, pos, n, scale)[2], lab[b:b + bs])  # noqa: E731
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


def main():
    W = N.load()
    ck = N.Checker("coop-positions")
    for sub in sys.argv[1:] or ["middle", "front", "middle-csc"]:
        check(ck, W, sub)
    ck.done()


if __name__ == "__main__":
    main()
