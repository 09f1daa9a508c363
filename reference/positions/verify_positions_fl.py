"""Checks testdata/coop-positions/{fedpgp,fedotp,pfedmoap}-{middle,front}
against independent float64 numpy versions of FedPGP, FedOTP and pFedMoAP
with the class token in the middle or front (prompts rearranged by
verify_positions.embed_prompts, the tiny CLIP of npclip.py): forward values,
gradients by central differences in every coordinate of every trained
tensor, one SGD step and its update, and the round (every batch's gradient
by central differences again)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402
import npclip as N  # noqa: E402
import verify_positions as VP  # noqa: E402

D = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "coop-positions"))


def load(sub):
    d = os.path.join(D, sub)
    init, _ = C.read_st(os.path.join(d, "init.safetensors"))
    st, meta = C.read_st(os.path.join(d, "step.safetensors"))
    rd, rmeta = C.read_st(os.path.join(d, "round.safetensors"))
    return init, st, meta, rd, rmeta


def np64(t):
    return t.double().numpy()


def check_update(ck, what, got, ref, p0, steps):
    """An update p − p0 against the reference's: 1e-4 of the largest update
    plus one float32 spacing of max|p| per SGD step (the fixture stores p in
    float32, which resolves a small update only to that spacing)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    d = float(np.abs(got - ref).max())
    lim = 1e-4 * float(np.abs(ref - p0).max()) + steps * float(np.spacing(np.float32(np.abs(ref).max())))
    ok = d <= lim
    ck.worst = max(ck.worst, d / lim)
    ck.fail += not ok
    print(f"  {'ok ' if ok else 'BAD'} {what}: max|Δ| {d:.2e} (limit {lim:.2e})")


class Memo:
    """f(x) for the last x seen under each tag: central differences change
    one tensor at a time, so the other tensors' text features are reused."""

    def __init__(self, f):
        self.f, self.last = f, {}

    def __call__(self, tag, x):
        e = self.last.get(tag)
        if e is not None and np.array_equal(e[0], x):
            return e[1]
        y = self.f(x)
        self.last[tag] = (x.copy(), y)
        return y


def check_direction(ck, what, loss, P, g, rng, h=1e-4):
    """The chained gradient g against central differences of the whole loss
    along a random direction of every tensor together."""
    d = {k: rng.standard_normal(v.shape) for k, v in P.items()}
    norm = np.sqrt(sum((x ** 2).sum() for x in d.values()))
    d = {k: x / norm for k, x in d.items()}
    fd = (loss({k: P[k] + h * d[k] for k in P}) - loss({k: P[k] - h * d[k] for k in P})) / (2 * h)
    an = sum(float((g[k] * d[k]).sum()) for k in P)
    ck.check(what, an, fd, 1e-4)


def text(W, ctx, tokens, pos, n):
    """Raw text features of the rows tokens with context ctx [n, D] (or one
    per row, [R, n, D]) placed at the class-token position."""
    return N.encode_embedded(W, VP.embed_prompts(W, ctx, tokens, pos, n), tokens.argmax(-1))


def check_sgd(ck, P0, g, st, names, lr, mom, wd):
    P1 = {k: v.copy() for k, v in P0.items()}
    N.sgd(P1, g, {}, lr, mom, wd)
    for k in names:
        ck.check("step1." + k, P1[k], st["step1." + k], 1e-4)
        check_update(ck, "step1." + k + " update", P1[k], st["step1." + k], P0[k], 1)


def check_round(ck, P0, rd, bs, grad_fn, loss_fn, lr, mom, wd, trained_names, clients=2):
    """Trains each client from P0 on its stored batches (grad_fn(P, ims,
    lab) by central differences) and compares losses and trained tensors."""
    out = []
    for ci in range(clients):
        P, bufs, losses = {k: v.copy() for k, v in P0.items()}, {}, []
        ims, lab = rd[f"client{ci}.images"].double().numpy(), rd[f"client{ci}.labels"].numpy()
        for b in range(0, len(lab), bs):
            losses.append(loss_fn(P, ims[b:b + bs], lab[b:b + bs]))
            N.sgd(P, grad_fn(P, ims[b:b + bs], lab[b:b + bs]), bufs, lr, mom, wd)
        ck.check(f"client{ci}.batch_losses", losses, rd[f"client{ci}.batch_losses"], 1e-5)
        for k in trained_names:
            ref = np64(rd[f"client{ci}.trained.{k}"])
            ck.check(f"client{ci}.trained.{k}", P[k], ref, 1e-4)
            check_update(ck, f"client{ci}.trained.{k} update", P[k], ref, P0[k], (len(lab) + bs - 1) // bs)
        out.append((P, len(lab)))
    return out


# ------------------------------------------------------------------- FedPGP
def fedpgp(ck, W, sub):
    init, st, meta, rd, rmeta = load(sub)
    pos, n, scale = meta["class_token_position"], int(meta["n_ctx"]), np.exp(float(meta["logit_scale"]))
    mu, tau = float(meta["mu"]), float(meta["temp"])
    tokens, labels = st["tokens"].numpy(), st["labels"].numpy()
    f0 = N.encode_embedded(W, N.embed(W, tokens), tokens.argmax(-1))  # the literal rows, written order
    names = ["prompt_learner.U", "prompt_learner.V", "prompt_learner.sigma"]
    P0 = {k: np64(init[k]) for k in names}

    def forward(P, imf):
        U, V, S = P[names[0]][0], P[names[1]][0], P[names[2]][0]
        uv = U @ V
        fP, fG, fUV = text(W, S + uv, tokens, pos, n), text(W, S, tokens, pos, n), text(W, uv, tokens, pos, n)
        logits = scale * N.normalize(imf) @ N.normalize(fP).T
        sp = np.sum(N.normalize(f0) * N.normalize(fG), -1)
        sn = np.sum(N.normalize(fG) * N.normalize(fP), -1)
        z = np.stack([sp, sn], 1) / tau
        con = float(np.mean(np.log(np.exp(z).sum(1)) - z[:, 0]))
        return fP, fG, fUV, logits, sp, sn, con

    def loss(P, imf, lab):
        r = forward(P, imf)
        return N.cross_entropy(r[3], lab) + mu * r[6]

    enc = Memo(lambda c: text(W, c, tokens, pos, n))

    def loss_ctx(Cx, imf, lab):
        """The loss as a function of the two contexts sigma + U·V ("P") and sigma ("G")."""
        fP, fG = enc("P", Cx["P"]), enc("G", Cx["G"])
        logits = scale * N.normalize(imf) @ N.normalize(fP).T
        sp = np.sum(N.normalize(f0) * N.normalize(fG), -1)
        sn = np.sum(N.normalize(fG) * N.normalize(fP), -1)
        z = np.stack([sp, sn], 1) / tau
        return N.cross_entropy(logits, lab) + mu * float(np.mean(np.log(np.exp(z).sum(1)) - z[:, 0]))

    def grad(P, imf, lab):
        """Central differences in every coordinate of both contexts, chained
        through ctx_P = sigma + U·V and ctx_G = sigma to U, V and sigma."""
        U, V, S = P[names[0]][0], P[names[1]][0], P[names[2]][0]
        g = N.fd_grad(lambda Q: loss_ctx(Q, imf, lab), {"P": S + U @ V, "G": S.copy()})
        return {names[0]: (g["P"] @ V.T)[None], names[1]: (U.T @ g["P"])[None], names[2]: (g["P"] + g["G"])[None]}

    imf = N.encode_image(W, np64(st["images"]))
    fP, fG, fUV, logits, sp, sn, con = forward(P0, imf)
    print(sub + " step:")
    ck.check("text_features", fP, st["text_features"], 1e-5)
    ck.check("text_features_sigma", fG, st["text_features_sigma"], 1e-5)
    ck.check("text_features_UV", fUV, st["text_features_UV"], 1e-5)
    ck.check("text_features_0", f0, st["text_features_0"], 1e-5)
    ck.check("cos_pos", sp, st["cos_pos"], 1e-5)
    ck.check("cos_neg", sn, st["cos_neg"], 1e-5)
    ck.check("logits", logits, st["logits"], 1e-5)
    ck.check("loss_ce", N.cross_entropy(logits, labels), st["loss_ce"], 1e-5)
    ck.check("loss_con", con, st["loss_con"], 1e-5)
    ck.check("loss", loss(P0, imf, labels), st["loss"], 1e-5)
    g = grad(P0, imf, labels)
    rng = np.random.default_rng(5)
    for i in range(2):
        check_direction(ck, f"chain rule, direction {i}", lambda P: loss(P, imf, labels), P0, g, rng)
    for k in names:
        ck.check("grad." + k, g[k], st["grad." + k], 1e-4)
    check_sgd(ck, P0, g, st, names, float(meta["lr"]), float(meta["momentum"]), float(meta["weight_decay"]))
    print(sub + " round:")
    imcache = {}

    def feats(ims):
        key = ims.tobytes()
        if key not in imcache:
            imcache[key] = N.encode_image(W, ims)
        return imcache[key]

    res = check_round(ck, P0, rd, int(rmeta["batch_size"]),
                      lambda P, ims, lab: grad(P, feats(ims), lab),
                      lambda P, ims, lab: loss(P, feats(ims), lab),
                      float(rmeta["lr"]), float(rmeta["momentum"]), float(rmeta["weight_decay"]), names)
    tot = sum(s for _, s in res)
    gl = sum(P[names[2]] * s / tot for P, s in res)
    ref = np64(rd["global.prompt_learner.sigma"])
    ck.check("global.prompt_learner.sigma", gl, ref, 1e-4)
    check_update(ck, "global.prompt_learner.sigma update", gl, ref, P0[names[2]], 3)


# ------------------------------------------------------------------- FedOTP
def image_tokens(W, img):
    """img [B, 3, S, S] -> every token's image feature [B, T, E] (ln_post per
    token, then the projection), as FedOTP's image encoder keeps them."""
    w = W["visual.conv1.weight"]
    P = w.shape[-1]
    B, _, S, _ = img.shape
    g = S // P
    patches = img.reshape(B, 3, g, P, g, P).transpose(0, 2, 4, 1, 3, 5).reshape(B, g * g, 3 * P * P)
    x = patches @ w.reshape(w.shape[0], -1).T
    cls = np.broadcast_to(W["visual.class_embedding"], (B, 1, x.shape[-1]))
    x = np.concatenate([cls, x], 1) + W["visual.positional_embedding"]
    x = N.ln(x, W["visual.ln_pre.weight"], W["visual.ln_pre.bias"])
    for i in N.layers(W, "visual.transformer.resblocks."):
        x = N.block(W, f"visual.transformer.resblocks.{i}.", x, False)
    return N.ln(x, W["visual.ln_post.weight"], W["visual.ln_post.bias"]) @ W["visual.proj"]


def cot_plan(sim, eps, top, thresh, max_iter, Nn):
    """FedOTP's unbalanced OT (entropic_COT_fast) on sim [R, M, N]: a = 1/M,
    b = top'/N with top' = min(R, top); no gradient through the plan."""
    R, M, _ = sim.shape
    K = np.exp(-(1.0 - sim) / eps)
    a = np.full((R, M), 1.0 / M)
    b = np.full((R, Nn), min(float(R), top) / Nn)
    Kp = K / a[:, :, None]
    Kq = np.transpose(K, (0, 2, 1)) / b[:, :, None]
    u, v = np.ones_like(a), np.ones_like(b)
    for _ in range(max_iter):
        v0 = v
        u = np.minimum(1.0 / np.einsum("rmn,rn->rm", Kp, v), 1.0)
        v = 1.0 / np.einsum("rnm,rm->rn", Kq, u)
        if np.abs(v - v0).mean() < thresh:
            break
    return u[:, :, None] * K * v[:, None, :]


def fedotp(ck, W, sub):
    init, st, meta, rd, rmeta = load(sub)
    pos, n, scale = meta["class_token_position"], int(meta["n_ctx"]), np.exp(float(meta["logit_scale"]))
    Nn = int(meta["num_prompt"])
    eps, top, thresh, max_iter = float(meta["eps"]), float(meta["top_percent"]), float(meta["thresh"]), int(meta["max_iter"])
    if meta["ot"] != "COT":
        raise SystemExit("fedotp: the verifier implements COT only")
    tokens, labels = st["tokens"].numpy(), st["labels"].numpy()
    Cn = len(tokens)
    key = "prompt_learner.ctx"
    P0 = {key: np64(init[key])}

    enc = Memo(lambda c: text(W, c, tokens, pos, n))

    def txt(P):
        return np.stack([enc(i, P[key][i]) for i in range(Nn)])  # [N, C, E]

    def sims(P, itok):
        t = N.normalize(txt(P))
        p = N.normalize(itok[:, 1:])  # patches [B, M, E]
        s = np.einsum("bme,nce->bcmn", p, t)  # [B, C, M, N]
        return s.reshape(-1, s.shape[2], Nn)  # row b·C + c

    def logits_with(P, itok, plan):
        s = sims(P, itok)
        return scale * (plan * s).sum((1, 2)).reshape(-1, Cn)

    def plan_at(P, itok):
        return cot_plan(sims(P, itok), eps, top, thresh, max_iter, Nn)

    itok = image_tokens(W, np64(st["images"]))
    print(sub + " step:")
    ck.check("image_features", itok, st["image_features"], 1e-5)
    ck.check("text_features", txt(P0), st["text_features"], 1e-5)
    plan = plan_at(P0, itok)
    logits = logits_with(P0, itok, plan)
    ck.check("logits", logits, st["logits"], 1e-5)
    ck.check("loss", N.cross_entropy(logits, labels), st["loss"], 1e-5)
    g = N.fd_grad(lambda P: N.cross_entropy(logits_with(P, itok, plan), labels), {key: P0[key].copy()})
    ck.check("grad." + key, g[key], st["grad." + key], 1e-4)
    check_sgd(ck, P0, g, st, [key], float(meta["lr"]), float(meta["momentum"]), float(meta["weight_decay"]))
    print(sub + " round:")
    imcache = {}

    def toks(ims):
        k = ims.tobytes()
        if k not in imcache:
            imcache[k] = image_tokens(W, ims)
        return imcache[k]

    def grad(P, ims, lab):
        it = toks(ims)
        pl = plan_at(P, it)
        return N.fd_grad(lambda Q: N.cross_entropy(logits_with(Q, it, pl), lab), P)

    def loss(P, ims, lab):
        it = toks(ims)
        return N.cross_entropy(logits_with(P, it, plan_at(P, it)), lab)

    res = check_round(ck, P0, rd, int(rmeta["batch_size"]), grad, loss, float(rmeta["lr"]), float(rmeta["momentum"]),
                      float(rmeta["weight_decay"]), [key])
    tot = sum(s for _, s in res)
    gl = sum(P[key][:1] * s / tot for P, s in res)
    ref = np64(rd["global." + key])
    ck.check("global." + key, gl, ref, 1e-4)
    check_update(ck, "global." + key + " update", gl, ref, P0[key][:1], 3)
    for ci, (P, _) in enumerate(res):
        ck.check(f"client{ci}.next." + key, np.concatenate([gl, P[key][1:]]), rd[f"client{ci}.next." + key], 1e-4)


# ----------------------------------------------------------------- pFedMoAP
def pfedmoap(ck, W, sub):
    init, st, meta, rd, rmeta = load(sub)
    pos, n, scale = meta["class_token_position"], int(meta["n_ctx"]), np.exp(float(meta["logit_scale"]))
    dg, H, scaling, lam = int(meta["gating_embed_dim"]), int(meta["gating_heads"]), float(meta["scaling"]), float(meta["lambda"])
    tokens, labels = st["tokens"].numpy(), st["labels"].numpy()
    E = W["text_projection"].shape[1]
    r = E // dg
    pool = lambda x: x[..., ::r]  # noqa: E731
    key = "prompt_learner.ctx"
    gates = sorted(k for k in init if k.startswith("gating."))
    P0 = {k: np64(init[k]) for k in [key] + gates}

    def lin(P, name, x):
        return x @ P[f"gating.{name}.weight"].T + P[f"gating.{name}.bias"]

    def gate(P, q, kv):
        """q [C, B, d], kv [C, Ex, d] -> output [C, B, d], head-mean attention [C, B, Ex]."""
        def heads(x):
            c, L, d = x.shape
            return x.reshape(c, L, H, d // H).transpose(0, 2, 1, 3)
        Q, K, V = heads(lin(P, "W_q", q)), heads(lin(P, "W_k", kv)), heads(lin(P, "W_v", kv))
        s = Q @ K.transpose(0, 1, 3, 2) * scaling
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = (s @ V).transpose(0, 2, 1, 3).reshape(q.shape)
        return lin(P, "W_o", o), s.mean(1)

    def experts_of(ctxs):
        return [pool(N.normalize(text(W, c, tokens, pos, n))) for c in ctxs]

    def forward(P, imf, ex, tl=None):
        I = N.normalize(imf)
        if tl is None:
            tl = text(W, P[key], tokens, pos, n)
        T = N.normalize(tl)
        local = scale * I @ T.T
        q = np.broadcast_to(pool(I), (len(tokens),) + pool(I).shape)  # [C, B, d]
        kv = np.stack([pool(T)] + ex).transpose(1, 0, 2)  # [C, Ex, d]
        out, att = gate(P, q, kv)
        mix = np.einsum("bd,cbd->bc", pool(I), out)
        return tl, lam * local + scale * mix, out, att

    def fd(P, imf, lab, ex):
        """Central differences: the context through the text encoder, the
        gate tensors with the text features held (they do not depend on them)."""
        g = N.fd_grad(lambda Q: N.cross_entropy(forward({**P, **Q}, imf, ex)[1], lab), {key: P[key]})
        tl = text(W, P[key], tokens, pos, n)
        rest = {k: P[k] for k in gates}
        g.update(N.fd_grad(lambda Q: N.cross_entropy(forward({**P, **Q}, imf, ex, tl)[1], lab), rest))
        return g

    imf = N.encode_image(W, np64(st["images"]))
    ex = experts_of([np64(init["expert0.ctx"]), np64(init["expert1.ctx"])])
    tl, logits, out, att = forward(P0, imf, ex)
    print(sub + " step:")
    ck.check("text_features", tl, st["text_features"], 1e-5)
    ck.check("nonlocal_text_features", np.stack(ex), st["nonlocal_text_features"], 1e-5)
    ck.check("gate_output", out, st["gate_output"], 1e-5)
    ck.check("gate_attention", att, st["gate_attention"], 1e-5)
    ck.check("logits", logits, st["logits"], 1e-5)
    ck.check("loss", N.cross_entropy(logits, labels), st["loss"], 1e-5)
    g = fd({k: v.copy() for k, v in P0.items()}, imf, labels, ex)
    gmax = max(float(np.abs(np64(st["grad." + k])).max()) for k in P0)
    for k in P0:
        if k.endswith(("W_k.bias", "W_v.bias", "W_o.bias")):
            # zero in exact arithmetic: float32 noise, against the largest gradient
            d = float(np.abs(g[k] - np64(st["grad." + k])).max()) / gmax
            print(f"  {'ok ' if d <= 1e-4 else 'BAD'} grad.{k}: |Δ| / max|grad| {d:.2e} (tol 1e-04)")
            ck.fail += d > 1e-4
            continue
        ck.check("grad." + k, g[k], st["grad." + k], 1e-4)
    lr, glr = float(meta["lr"]), float(meta["gating_lr"])
    # one step of two fresh SGDs (the momentum buffer starts as the first d)
    P1 = {k: P0[k] - glr * (g[k] + float(meta["gating_weight_decay"]) * P0[k]) for k in gates}
    P1[key] = P0[key] - lr * (g[key] + float(meta["weight_decay"]) * P0[key])
    for k in P0:
        ck.check("step1." + k, P1[k], st["step1." + k], 1e-4)
        check_update(ck, "step1." + k + " update", P1[k], st["step1." + k], P0[k], 1)
    print(sub + " round (client 0 from the global prompt, experts pool[selected]):")
    poolT = np64(rd["pool"])
    sel = [int(i) for i in rd["selected"].numpy()]
    dist = [float(np.linalg.norm(poolT[0] - poolT[j])) for j in range(1, len(poolT))]
    ck.check("distances_to_0", dist, rd["distances_to_0"], 1e-5)
    if sorted(range(1, len(poolT)), key=lambda j: dist[j - 1])[:len(sel)] != sel:
        print("  BAD selected: not the nearest")
        ck.fail += 1
    exr = experts_of([poolT[i] for i in sel])
    P = {k: v.copy() for k, v in P0.items()}
    P[key] = np64(rd["global_prompt"])
    start = {k: v.copy() for k, v in P.items()}
    ims, lab = np64(rd["client0.images"]), rd["client0.labels"].numpy()
    feats = N.encode_image(W, ims)
    bs, mom = int(rmeta["batch_size"]), float(rmeta["momentum"])
    bufs_p, bufs_g, losses = {}, {}, []
    for b in range(0, len(lab), bs):
        fb, lb = feats[b:b + bs], lab[b:b + bs]
        losses.append(N.cross_entropy(forward(P, fb, exr)[1], lb))
        gb = fd(P, fb, lb, exr)
        pp = {key: P[key]}
        N.sgd(pp, {key: gb[key]}, bufs_p, lr, mom, float(rmeta["weight_decay"]))
        gp = {k: P[k] for k in gates}
        N.sgd(gp, {k: gb[k] for k in gates}, bufs_g, glr, float(rmeta["gating_momentum"]), float(rmeta["gating_weight_decay"]))
        P = {**pp, **gp}
    ck.check("client0.batch_losses", losses, rd["client0.batch_losses"], 1e-5)
    for k in P:
        ref = np64(rd["client0.trained." + k])
        ck.check("client0.trained." + k, P[k], ref, 1e-4)
        check_update(ck, "client0.trained." + k + " update", P[k], ref, start[k], len(losses))


def main():
    W = N.load()
    ck = N.Checker("coop-positions (fedpgp, fedotp, pfedmoap)")
    todo = sys.argv[1:] or [f"{m}-{p}" for m in ("fedpgp", "fedotp", "pfedmoap") for p in ("middle", "front")]
    for sub in todo:
        {"fedpgp": fedpgp, "fedotp": fedotp, "pfedmoap": pfedmoap}[sub.split("-")[0]](ck, W, sub)
    ck.done()


if __name__ == "__main__":
    main()
