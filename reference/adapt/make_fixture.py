"""ADAPT reference fixtures (testdata/adapt): an independent float64 PyTorch ADAPT.

ADAPT ("Learning to Prompt Your Domain for Federated Vision-Language Models") has no
public code. This oracle is written from the paper (/work/shared/seeds/adapt-paper.txt),
/work/shared/specs/adapt.md and the decisions the spec leaves open as pfedmma's
methods/adapt package documentation states them (a specification in words; none of
its code is read), and differentiated by PyTorch's autograd, in float64 on CPU:

- frozen CLIP: OpenAI's clip/model.py (as shipped in KaiyangZhou/CoOp) with the tiny
  weights of testdata/clip-tiny, in float64 (its LayerNorm subclass, which computes
  in float32, computes in float64 here); its modules are called one by one;
- text: one CoOp prompt per domain, P_T^i [n_ctx, Dt], replacing the token embeddings
  at positions 1..n_ctx of "X X X X class<i>." (SOT prefix, class, '.', EOT suffix
  frozen); f_T^i(c) = EOT feature @ text_projection, L2-normalised: u^i_c;
- vision: n visual prompt tokens [n, Dv] inserted after [cls] into the output of
  ln_pre (no positional embedding), every block, f_V = ln_post(x_cls) @ proj;
- domain weights: the last block's input x, ln_1(x), its frozen q and k projections
  (in_proj weight and bias, all heads, width Dv) of [cls] and of prompt token i, each
  L2-normalised; a_i = <q̂, k̂_i>/τ_d (τ_d 0.1), w = softmax(a);
- f_T(x, c) = Σ_i w_i u^i_c; logits = s·cos(f_V, f_T(x, c)), s = e⁴ (the tiny
  CLIP's scale); loss = mean CE(logits, y) + λ·mean CE(a, own domain), λ 1;
- a client trains its own domain's prompt and the visual prompts with AdamW
  (torch.optim.AdamW, lr 5e-4, betas (0.9, 0.999), weight decay 0.01); the other
  domains' prompts are constants moved before every local step by the EMA
  t ← 0.99·t + 0.01·t_received toward the latest relayed copy (none before one was
  relayed);
- server: text prompts relayed (each client receives the other domain's), visual
  prompts averaged uniformly; the global model is the averaged visual prompts with
  every domain's relayed prompt.

- AdaLN (optional, step_adaln only): adaln_layers 3 DiT-style layers on the mixed text
  features of each (image, class), h ← h + LN(h)⊙γ + β with [γ|β] = W·f̂_V + b (f̂_V
  the normalised image features, γ the first E rows), LN without affine parameters
  (eps 1e-5), added before the cosine head;

Files (n = 2 domains, n_ctx 4): init (text prompts and visual prompts
N(0, 0.02²), seed 101) with step (domain 0) and step_ema (domain 1, with an EMA target
ema_target.text_prompt.0 given in the batch file), one step of SGD (lr 0.01, momentum 0.9,
weight decay 5e-4: AdamW's first step is −lr·sign(g), blind to the gradient's size);
round: two rounds of two clients (client i is domain i), AdamW (lr 5e-3), a fresh
optimizer each round, batches of 4 in stored order.
init_adaln (init plus 3 AdaLN layers, W, b = 0.2·N(0, 1)) with step_adaln (domain 0).
Usage: python3 reference/adapt/make_fixture.py  (make fixtures-external)
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "101"))
LR, WD = 5e-4, 0.01  # the paper's AdamW
ROUND_LR = float(os.environ.get("PFX_ROUND_LR", "5e-3"))
STEP_LR, STEP_MOM, STEP_WD = 0.01, 0.9, 5e-4  # the steps' SGD (its update shows the gradient)
TAU_D, LAMBDA, EMA = 0.1, 1.0, 0.99
N_CTX, DOMAINS = 4, 2
ADALN_LAYERS = 3
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "adapt"))


class Adapt:
    """The frozen tiny CLIP and ADAPT's forward on it (float64)."""

    def __init__(self, clip_model, tokens):
        self.m = clip_model
        self.tokens = tokens
        with torch.no_grad():
            self.emb = clip_model.token_embedding(tokens)  # [C, 77, Dt]
        self.scale = clip_model.logit_scale.exp()

    def text(self, prompt):
        """u_c [C, E] of one domain's prompt [n_ctx, Dt]."""
        m, C = self.m, self.tokens.shape[0]
        x = torch.cat([self.emb[:, :1], prompt.unsqueeze(0).expand(C, -1, -1), self.emb[:, 1 + N_CTX:]], dim=1)
        x = x + m.positional_embedding
        x = m.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        x = m.ln_final(x)
        f = x[torch.arange(C), self.tokens.argmax(dim=-1)] @ m.text_projection
        return f / f.norm(dim=-1, keepdim=True)

    def vision(self, images, vp):
        """f_V [B, E] and the domain scores a [B, n]."""
        v = self.m.visual
        x = v.conv1(images)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        cls = v.class_embedding + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype)
        x = torch.cat([cls, x], dim=1) + v.positional_embedding
        x = v.ln_pre(x)
        B, n = x.shape[0], vp.shape[0]
        x = torch.cat([x[:, :1], vp.unsqueeze(0).expand(B, -1, -1), x[:, 1:]], dim=1)
        blocks = v.transformer.resblocks
        x = x.permute(1, 0, 2)  # [T, B, D]
        for blk in blocks[:-1]:
            x = blk(x)
        last = blocks[-1]
        h = last.ln_1(x)
        D = h.shape[-1]
        W, b = last.attn.in_proj_weight, last.attn.in_proj_bias
        q = h[0] @ W[:D].T + b[:D]  # [B, D]
        k = h[1:1 + n] @ W[D:2 * D].T + b[D:2 * D]  # [n, B, D]
        q = q / q.norm(dim=-1, keepdim=True)
        k = k / k.norm(dim=-1, keepdim=True)
        a = torch.einsum("bd,nbd->bn", q, k) / TAU_D
        x = last(x).permute(1, 0, 2)
        f = v.ln_post(x[:, 0]) @ v.proj
        return f, a

    def loss(self, P, images, labels, domain):
        u = torch.stack([self.text(P[f"text_prompt.{i}"]) for i in range(DOMAINS)])  # [n, C, E]
        fv, a = self.vision(images, P["visual_prompt"])
        w = torch.softmax(a, dim=-1)  # [B, n]
        ft = torch.einsum("bn,nce->bce", w, u)  # [B, C, E]
        fvn = fv / fv.norm(dim=-1, keepdim=True)
        for l in range(ADALN_LAYERS):
            if f"adaln.{l}.weight" not in P:
                break
            # DiT-style: h ← h + LN(h)⊙γ(x) + β(x), [γ|β] = W f̂_V + b, LN without affine
            gb = fvn @ P[f"adaln.{l}.weight"].T + P[f"adaln.{l}.bias"]  # [B, 2E]
            E = ft.shape[-1]
            gamma, beta = gb[:, :E].unsqueeze(1), gb[:, E:].unsqueeze(1)
            ft = ft + F.layer_norm(ft, (E,)) * gamma + beta
        ftn = ft / ft.norm(dim=-1, keepdim=True)
        logits = self.scale * torch.einsum("be,bce->bc", fvn, ftn)
        dom = torch.full((images.shape[0],), domain, dtype=torch.long)
        ce, ld = F.cross_entropy(logits, labels), F.cross_entropy(a, dom)
        return ce + LAMBDA * ld, {"logits": logits, "image_features": fv, "domain_scores": a, "domain_weights": w,
                                  "text_features": u, "loss_ce": ce.reshape(1), "loss_domain": ld.reshape(1)}


def trained_names(domain, params=()):
    return [f"text_prompt.{domain}", "visual_prompt"] + sorted(k for k in params if k.startswith("adaln."))


class ClientSim:
    """One client (domain d): its parameters, its received copies, AdamW per round."""

    def __init__(self, model, init, domain):
        self.model, self.d = model, domain
        self.P = {k: v.clone() for k, v in init.items()}
        self.recv = {}

    def ema(self):
        for k, t in self.recv.items():
            self.P[k] = EMA * self.P[k] + (1 - EMA) * t

    def train_round(self, images, labels, lr):
        leaves = {k: self.P[k].clone().requires_grad_(True) for k in trained_names(self.d)}
        opt = torch.optim.AdamW(list(leaves.values()), lr=lr, betas=(0.9, 0.999), weight_decay=WD)
        losses = []
        for b in range(0, len(labels), 4):
            self.ema()
            P = dict(self.P, **leaves)
            loss, _ = self.model.loss(P, images[b:b + 4], labels[b:b + 4], self.d)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        for k, v in leaves.items():
            self.P[k] = v.detach().clone()
        return losses


def main():
    torch.set_default_dtype(torch.float64)
    C.import_reference(C.mirror("COOP_REF", "/work/.mirror/KaiyangZhou+CoOp/repo"), [], clip_dir="clip")
    sys.modules["clip.model"].LayerNorm.forward = torch.nn.LayerNorm.forward
    clip_model = C.load_clip_to_cpu().double()
    for p in clip_model.parameters():
        p.requires_grad_(False)
    step, rnd = C.promptfl_inputs()
    tokens = step["tokens"]  # "X X X X class<i>." (n_ctx 4)
    model = Adapt(clip_model, tokens)
    Dt, Dv = clip_model.ln_final.weight.shape[0], clip_model.visual.ln_pre.weight.shape[0]
    g = torch.Generator().manual_seed(SEED)
    init = {f"text_prompt.{i}": 0.02 * torch.randn(N_CTX, Dt, generator=g) for i in range(DOMAINS)}
    init["visual_prompt"] = 0.02 * torch.randn(DOMAINS, Dv, generator=g)
    meta = {"method": "adapt", "n_ctx": N_CTX, "domains": DOMAINS, "tau": TAU_D, "lambda": LAMBDA, "ema": EMA,
            "logit_scale": 4.0, "optimizer": "adamw", "weight_decay": WD, "seed": SEED,
            "prec": "float64 (stored as float32)",
            "reference": "independent float64 PyTorch ADAPT from the paper and spec (reference/adapt)"}
    C.write_st(os.path.join(OUT, "init.safetensors"), init, {"method": "adapt", "seed": SEED, "n_ctx": N_CTX})

    # --- steps: domain 0 plain; domain 1 after the EMA toward a relayed copy of prompt 0 ---
    target = init["text_prompt.0"] + 0.05 * torch.randn(N_CTX, Dt, generator=g)
    E = clip_model.text_projection.shape[1]
    init_adaln = dict(init)
    for l in range(ADALN_LAYERS):  # random, not the zero init, so that every path carries gradient
        init_adaln[f"adaln.{l}.weight"] = 0.2 * torch.randn(2 * E, E, generator=g)
        init_adaln[f"adaln.{l}.bias"] = 0.2 * torch.randn(2 * E, generator=g)
    C.write_st(os.path.join(OUT, "init_adaln.safetensors"), init_adaln,
               {"method": "adapt", "seed": SEED, "n_ctx": N_CTX, "adaln_layers": ADALN_LAYERS,
                "init": "init, and AdaLN W, b = 0.2·N(0, 1)"})
    for name, domain, ema_target, p0 in [("step", 0, None, init), ("step_ema", 1, target, init),
                                         ("step_adaln", 0, None, init_adaln)]:
        c = ClientSim(model, p0, domain)
        if ema_target is not None:
            c.recv = {"text_prompt.0": ema_target}
        c.ema()
        leaves = {k: c.P[k].clone().requires_grad_(True) for k in trained_names(domain, p0)}
        P = dict(c.P, **leaves)
        loss, parts = model.loss(P, step["images"].double(), step["labels"], domain)
        opt = torch.optim.SGD(list(leaves.values()), lr=STEP_LR, momentum=STEP_MOM, weight_decay=STEP_WD)
        opt.zero_grad()
        loss.backward()
        out = {"images": step["images"], "labels": step["labels"], "tokens": tokens,
               "domain": torch.tensor([domain]), "loss": loss.detach().reshape(1)}
        out.update({k: v.detach() for k, v in parts.items()})
        for k, v in leaves.items():
            out["grad." + k] = v.grad.clone()
        opt.step()
        for k, v in leaves.items():
            out["step1." + k] = v.detach().clone()
        if ema_target is not None:
            out["ema_target.text_prompt.0"] = ema_target
            out["ema.text_prompt.0"] = c.P["text_prompt.0"]  # the copy after the EMA, before the step
        C.write_st(os.path.join(OUT, name + ".safetensors"), out,
                   {**meta, "domain": domain, "optimizer": "sgd", "lr": STEP_LR, "momentum": STEP_MOM,
                    "weight_decay": STEP_WD, "params": "init_adaln.safetensors" if p0 is init_adaln else "init.safetensors",
                    "adaln_layers": ADALN_LAYERS if p0 is init_adaln else 0})

    # --- round: two rounds, client i = domain i, Relay (text relayed, visual averaged) ---
    clients = [ClientSim(model, init, i) for i in range(DOMAINS)]
    data = [(rnd[f"client{i}.images"].double(), rnd[f"client{i}.labels"]) for i in range(DOMAINS)]
    res = {"tokens": tokens}
    for r in range(2):
        uploads = []
        for c, (ims, lab) in zip(clients, data):
            res[f"round{r}.client{c.d}.batch_losses"] = torch.tensor(c.train_round(ims, lab, ROUND_LR))
            uploads.append({k: c.P[k].clone() for k in trained_names(c.d)})
        vis = sum(u["visual_prompt"] for u in uploads) / len(uploads)
        relayed = {f"text_prompt.{i}": uploads[i][f"text_prompt.{i}"] for i in range(DOMAINS)}
        for c in clients:
            for k, v in c.P.items():  # what each client holds after its training
                res[f"round{r}.client{c.d}.trained.{k}"] = v.clone()
            c.P["visual_prompt"] = vis.clone()
            c.recv = {k: v.clone() for k, v in relayed.items() if k != f"text_prompt.{c.d}"}
        res[f"round{r}.global.visual_prompt"] = vis
        for k, v in relayed.items():
            res[f"round{r}.global.{k}"] = v
    for i, c in enumerate(clients):
        res[f"client{i}.images"], res[f"client{i}.labels"] = rnd[f"client{i}.images"], data[i][1]
        res[f"client{i}.domain"] = torch.tensor([i])
    C.write_st(os.path.join(OUT, "round.safetensors"), res,
               {**meta, "lr": ROUND_LR, "batch_size": 4, "local_epochs": 1, "rounds": 2,
                "client_sizes": str([len(d[1]) for d in data]), "params": "init.safetensors",
                "aggregation": "visual prompts uniform mean; text prompts relayed"})
    print("adapt fixtures written to", OUT)


if __name__ == "__main__":
    main()
