"""Checks testdata/dpfpl against an independent float64 numpy DP-FPL: the
forward (ctx = global + local), ∂loss/∂ctx by central differences in every
context coordinate, the factorisation by QR (Gram–Schmidt's Q with a positive
diagonal of R), the mechanism (clipping, the recorded noise, the local
gradient in the factored form (I + U·Uᵀ)·(gU/10)·V + U·(gV/10)), the noise
calibration σ·C/B with σ = √(T·log(1/δ))/ε, one SGD step, and the round
(each client's local step, the noisy mean of the clipped global gradients,
the global step)."""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402
import npclip as N  # noqa: E402

D = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "dpfpl"))
G, L = "prompt_learner.global_ctx", "prompt_learner.local_ctx"


def forward(W, ctx, imf, tokens, scale):
    emb = N.embed(W, tokens)
    emb[:, 1:1 + ctx.shape[0]] = ctx
    txt = N.encode_embedded(W, emb, tokens.argmax(-1))
    return txt, scale * N.normalize(imf) @ N.normalize(txt).T


def gs_qr(a):
    """Q of a's QR with diag(R) > 0: the classical Gram–Schmidt's basis."""
    q, r = np.linalg.qr(a)
    return q * np.sign(np.diag(r))


def mechanism(g, local, omega, noise_u, noise_v, clip, on):
    U = gs_qr(local @ omega)        # [n, r]
    V = gs_qr(local.T @ U).T        # [r, D]

    def clipped(x):
        nrm = np.linalg.norm(x)
        return x * (clip / nrm) if on and nrm > clip else x
    gg = clipped(g.copy())
    gu, gv = clipped(g @ V.T), clipped(U.T @ g)
    if on:
        gu, gv = gu + noise_u, gv + noise_v
    a, b = gu / 10, gv / 10
    gl = (np.eye(U.shape[0]) + U @ U.T) @ a @ V + U @ b
    return U, V, gg, gu, gv, gl


def sigma(meta):
    eps = float(meta["noise"])
    return math.sqrt(int(meta["rounds"]) * math.log(1 / float(meta["delta"]))) / eps if eps > 0 else 0.0


def check_step(ck, W, name):
    st, meta = C.read_st(os.path.join(D, name))
    init, _ = C.read_st(os.path.join(D, meta["params"]))
    scale = np.exp(float(meta["logit_scale"]))
    lr, mom, wd, clip = float(meta["lr"]), float(meta["momentum"]), float(meta["weight_decay"]), float(meta["norm_thresh"])
    on = float(meta["noise"]) > 0
    g0, l0 = init[G].double().numpy(), init[L].double().numpy()
    tokens, labels = st["tokens"].numpy(), st["labels"].numpy()
    imf = N.encode_image(W, st["images"].double().numpy())
    txt, logits = forward(W, g0 + l0, imf, tokens, scale)
    print(name + ":")
    for k, v in [("image_features", imf), ("text_features", txt), ("logits", logits)]:
        ck.check(k, v, st[k], 1e-5)
    loss = lambda P: N.cross_entropy(forward(W, P["ctx"], imf, tokens, scale)[1], labels)  # noqa: E731
    ck.check("loss", loss({"ctx": g0 + l0}), st["loss"], 1e-5)
    g = N.fd_grad(loss, {"ctx": g0 + l0})["ctx"]
    ck.check("raw_grad (∂loss/∂ctx)", g, st["raw_grad"], 1e-4)
    want_std = sigma(meta) * clip / int(meta["batch_size"])
    ck.check("noise_std", [want_std], st["noise_std"], 1e-6)
    nu = st["client0.noise_u"].double().numpy() if on else None
    nv = st["client0.noise_v"].double().numpy() if on else None
    U, V, gg, gu, gv, gl = mechanism(g, l0, st["client0.omega"].double().numpy(), nu, nv, clip, on)
    ck.check("local_u_ctx", U, st["local_u_ctx"], 1e-5)
    ck.check("local_v_ctx", V, st["local_v_ctx"], 1e-5)
    ck.check("residual", l0 - U @ V, st["residual"], 1e-5)
    ck.check("grad." + G, gg, st["grad." + G], 1e-4)
    ck.check("grad.prompt_learner.local_u_ctx", gu, st["grad.prompt_learner.local_u_ctx"], 1e-4)
    ck.check("grad.prompt_learner.local_v_ctx", gv, st["grad.prompt_learner.local_v_ctx"], 1e-4)
    ck.check("grad." + L, gl, st["grad." + L], 1e-4)
    if on:
        for what, x in [("global", g), ("U", g @ V.T), ("V", U.T @ g)]:
            if not np.linalg.norm(x) > clip:
                raise SystemExit(f"{name}: the {what} gradient's norm {np.linalg.norm(x):.3g} does not exceed the threshold {clip}: no clipping checked")
    P = {G: g0.copy(), L: l0.copy()}
    N.sgd(P, {G: gg, L: gl}, {}, lr, mom, wd)
    for k, p0 in [(G, g0), (L, l0)]:
        ck.check("step1." + k, P[k], st["step1." + k], 1e-4)
        ck.check("step1." + k + " update", P[k] - p0, st["step1." + k].double().numpy() - p0, 1e-4)


def main():
    W = N.load()
    ck = N.Checker("dpfpl")
    check_step(ck, W, "step_nodp.safetensors")
    check_step(ck, W, "step.safetensors")
    rd, rm = C.read_st(os.path.join(D, "round.safetensors"))
    init, _ = C.read_st(os.path.join(D, rm["params"]))
    scale = np.exp(float(rm["logit_scale"]))
    lr, mom, wd, clip = float(rm["lr"]), float(rm["momentum"]), float(rm["weight_decay"]), float(rm["norm_thresh"])
    K, B = int(rm["num_users"]), int(rm["batch_size"])
    tokens = rd["tokens"].numpy()
    g0, l0 = init[G].double().numpy(), init[L].double().numpy()
    print("round:")
    ck.check("server_std", [sigma(rm) * clip / B / K], [float(rm["server_std"])], 1e-6)
    clipped = []
    for ci in range(K):
        imf = N.encode_image(W, rd[f"client{ci}.images"].double().numpy())
        lab = rd[f"client{ci}.labels"].numpy()
        loss = lambda P: N.cross_entropy(forward(W, P["ctx"], imf, tokens, scale)[1], lab)  # noqa: E731
        ck.check(f"client{ci}.batch_losses", [loss({"ctx": g0 + l0})], rd[f"client{ci}.batch_losses"], 1e-5)
        g = N.fd_grad(loss, {"ctx": g0 + l0})["ctx"]
        _, _, gg, _, _, gl = mechanism(g, l0, rd[f"client{ci}.omega"].double().numpy(), rd[f"client{ci}.noise_u"].double().numpy(),
                                       rd[f"client{ci}.noise_v"].double().numpy(), clip, True)
        clipped.append(gg)
        P = {L: l0.copy()}
        N.sgd(P, {L: gl}, {}, lr, mom, wd)
        ref = rd[f"client{ci}.trained.{L}"].double().numpy()
        ck.check(f"client{ci}.trained.{L}", P[L], ref, 1e-4)
        ck.check(f"client{ci}.trained.{L} update", P[L] - l0, ref - l0, 1e-4)
    avg = sum(clipped) / K + rd["server_noise"].double().numpy()
    P = {G: g0.copy()}
    N.sgd(P, {G: avg}, {}, lr, mom, wd)
    ref = rd["global." + G].double().numpy()
    ck.check("global." + G, P[G], ref, 1e-4)
    ck.check("global." + G + " update", P[G] - g0, ref - g0, 1e-4)
    ck.done()


if __name__ == "__main__":
    main()
