"""FedOT reference fixtures (testdata/fedot): an independent float64 PyTorch FedOT.

FedOT has no public code. This oracle is written from the paper
(/work/shared/seeds/fedot-paper.txt, Algorithm 1 and section 3) and
/work/shared/specs/fedot.md only — not from the Go code — and differentiated by
PyTorch's autograd, in float64 on CPU:

- frozen black-box image encoder: OpenAI's CLIP (clip/model.py as shipped in
  KaiyangZhou/CoOp) with the tiny weights of testdata/clip-tiny, run in float64;
  h = encode_image(x) (before any normalisation); its LayerNorm subclass, which computes
  in float32, computes in float64 here;
- local map w_1 = diag(Q_1 … Q_r), Q_j = (I + R_j)(I − R_j)^{-1},
  R_j = ½(X_j − X_jᵀ) (the Cayley transform, formed with an explicit inverse —
  torch.linalg.inv — here, where the Go code factors I − R by LU and never forms
  w_1); X [r, d/r, d/r] is the unconstrained parameter, initial value I;
- h' = w_1 h; logits = τ · w_g · h'/‖h'‖ (rows of w_g not normalised), τ = exp(logit
  scale) = e⁴ for the tiny CLIP; plain cross entropy;
- w_g [K, d] initialised with the L2-normalised text features of "a photo of a {}."
  (the spec's decision), the template's words tokenised through a table (the tiny
  vocabulary has 1000 ids; "photo" gets the synthetic id 125);
- Algorithm 1: SGD (torch.optim.SGD, momentum 0.9, weight decay 5e-4 — the paper's
  wd; momentum not given) on w_g and X with one learning rate, w_1 recomputed from X
  at every step; each client starts the round from the global w_g with its own X
  and a fresh optimizer, one local epoch in batches of 4 in stored order; it uploads
  w_g only; the server takes the uniform mean (1/N) Σ_i w_g^(i).

Files: init (X = I, r = 1: FedOT) with step; init_b2 (r = 2 blocks: FedOT(+B), X =
I + 0.1·N(0, 1), so R ≠ 0) with step_b2; round (two clients from init_b2). Usage:
python3 reference/fedot/make_fixture.py  (make fixtures-external)
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "83"))
LR = float(os.environ.get("PFX_LR", "0.01"))
ROUND_LR = float(os.environ.get("PFX_ROUND_LR", "0.02"))
MOM, WD = 0.9, 5e-4
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "fedot"))
WORDS = {"a": [320], "photo": [125], "of": [539]}
TEMPLATE = "a photo of a {}."


def local_map(x):
    """w_1 = diag(Q_1 … Q_r), Q_j = (I + R_j)(I − R_j)^{-1}, R_j = ½(X_j − X_jᵀ)."""
    r, s, _ = x.shape
    eye = torch.eye(s, dtype=x.dtype)
    qs = []
    for j in range(r):
        R = 0.5 * (x[j] - x[j].T)
        qs.append((eye + R) @ torch.linalg.inv(eye - R))
    return torch.block_diag(*qs)


def forward(wg, x, h, tau):
    """logits = τ · w_g · h'/‖h'‖, h' = w_1 h (rows of h are images)."""
    hp = h @ local_map(x).T
    return tau * (hp / hp.norm(dim=-1, keepdim=True)) @ wg.T, hp


def sgd(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=MOM, weight_decay=WD)


def main():
    torch.set_default_dtype(torch.float64)
    C.import_reference(C.mirror("COOP_REF", "/work/.mirror/KaiyangZhou+CoOp/repo"), [], clip_dir="clip")
    # OpenAI's LayerNorm subclass computes in float32 ("to handle fp16"): in float64 here
    sys.modules["clip.model"].LayerNorm.forward = torch.nn.LayerNorm.forward
    clip_model = C.load_clip_to_cpu().double()
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    C.TABLES.words.update(WORDS)
    tokens = torch.cat([C.TABLES.tokenize(TEMPLATE.format(n)) for n in names])
    with torch.no_grad():
        txt = clip_model.encode_text(tokens)
    tau = math.exp(clip_model.logit_scale.item())
    d, K = txt.shape[1], txt.shape[0]
    wg0 = txt / txt.norm(dim=-1, keepdim=True)

    def encode(images):
        with torch.no_grad():
            return clip_model.encode_image(images.double())

    meta = {"method": "fedot", "variant": "fedot", "tau": repr(tau), "logit_scale": 4.0,
            "normalize_classifier": "false", "template": TEMPLATE, "momentum": MOM, "weight_decay": WD,
            "seed": SEED, "prec": "float64 (stored as float32)",
            "reference": "independent float64 PyTorch FedOT from the paper (reference/fedot)"}
    g = torch.Generator().manual_seed(SEED)
    inits = {
        "": {"w_g": wg0.clone(), "x": torch.eye(d).reshape(1, d, d)},
        "_b2": {"w_g": wg0.clone(), "x": torch.eye(d // 2).repeat(2, 1, 1) + 0.1 * torch.randn(2, d // 2, d // 2, generator=g)},
    }
    for suffix, p0 in inits.items():
        r = p0["x"].shape[0]
        C.write_st(os.path.join(OUT, f"init{suffix}.safetensors"), p0, {"method": "fedot", "blocks": r, "seed": SEED})
        wg, x = p0["w_g"].clone().requires_grad_(True), p0["x"].clone().requires_grad_(True)
        h = encode(step["images"])
        logits, hp = forward(wg, x, h, tau)
        loss = F.cross_entropy(logits, step["labels"])
        opt = sgd([wg, x], LR)
        opt.zero_grad()
        loss.backward()
        out = {"images": step["images"], "labels": step["labels"], "tokens": tokens, "image_features": h,
               "transformed_features": hp.detach(), "w_1": local_map(x.detach()), "logits": logits.detach(),
               "loss": loss.detach().reshape(1), "grad.w_g": wg.grad.clone(), "grad.x": x.grad.clone()}
        opt.step()
        out["step1.w_g"], out["step1.x"] = wg.detach().clone(), x.detach().clone()
        C.write_st(os.path.join(OUT, f"step{suffix}.safetensors"), out,
                   {**meta, "blocks": r, "lr": LR, "params": f"init{suffix}.safetensors"})

    # --- round: two clients from init_b2; w_g uploaded, uniform mean ---
    p0 = inits["_b2"]
    res = {"tokens": tokens}
    uploads = []
    for ci in range(2):
        ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
        wg, x = p0["w_g"].clone().requires_grad_(True), p0["x"].clone().requires_grad_(True)
        opt = sgd([wg, x], ROUND_LR)
        h = encode(ims)
        losses = []
        for b in range(0, len(lab), 4):
            logits, _ = forward(wg, x, h[b:b + 4], tau)
            loss = F.cross_entropy(logits, lab[b:b + 4])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
        res[f"client{ci}.batch_losses"] = torch.tensor(losses)
        res[f"client{ci}.trained.w_g"] = wg.detach().clone()
        res[f"client{ci}.trained.x"] = x.detach().clone()
        uploads.append(wg.detach().clone())
    res["global.w_g"] = sum(uploads) / len(uploads)
    C.write_st(os.path.join(OUT, "round.safetensors"), res,
               {**meta, "blocks": 2, "lr": ROUND_LR, "batch_size": 4, "local_epochs": 1,
                "client_sizes": str([len(rnd["client0.labels"]), len(rnd["client1.labels"])]),
                "params": "init_b2.safetensors", "aggregated": "w_g", "aggregation": "uniform mean", "local": "[x]"})
    print("fedot fixtures written to", OUT)


if __name__ == "__main__":
    main()
