"""PLOT reference fixtures on the tiny CLIPs, made by running the authors' code.

Runs CHENGY12/PLOT (plot-coop/trainers/plot.py: PromptLearner with N prompts, TextEncoder,
CustomCLIP with its Sinkhorn and forward, the PLOT trainer's build_model and non-amp
forward_backward; plot-coop/clip/model.py: CLIP, build_model, and for the ResNet fixtures
ModifiedResNet with their AttentionPool2d, which returns every token) with Dassl's real
TrainerBase (model_backward_and_update), build_optimizer and build_lr_scheduler
(KaiyangZhou/Dassl.pytorch, reference/common/common.py), float32 on CPU.

Two backbones: testdata/clip-tiny (ViT; the primary fixtures, local features = the 16 patch
tokens) and testdata/clip-rn-tiny (rn_*: the authors' own RN50 path, local features = the 4
attention-pool tokens of the 2x2 map). Their ViT returns the CLS feature alone, which their
forward cannot use (it indexes the output as tokens): for the ViT its forward is REPLACED by
FLiP's VisionTransformer.forward (github 0-ml/flip, flcore/models/clip/model.py: ln_post and
proj on every token, token-major [1 + M, b, d]), which is how FLiP runs PLOT on ViT-B/16.
Everything replaced is marked REPLACED and listed in reference/plot/README.md.

Usage: /usr/bin/python3 make_fixture.py [--out testdata/plot]   (PLOT_REF: the git mirror)
"""
import argparse
import os
import sys
import tempfile
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

N_PROMPTS, N_CTX = 4, 4         # the authors' N (main.sh: N=$2, their default 4); n_ctx 16 in main.sh
LR, ROUND_LR, MOM, WD = 0.002, 0.01, 0.9, 5e-4
SEED, IMAGE_SEED = 41, 43  # IMAGE_SEED: the rn_* images only
PUB = "plot-coop/"


def install(repo):
    root = tempfile.mkdtemp(prefix="plot-ref-")
    for f in ["trainers/plot.py", "clip/model.py"]:
        out = os.path.join(root, f)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            fh.write(C.git_show(repo, PUB + f))
    clip_pkg = types.ModuleType("clip")
    clip_pkg.__path__ = [os.path.join(root, "clip")]
    sys.modules["clip"] = clip_pkg
    model = C.load_module("clip.model", os.path.join(root, "clip", "model.py"))
    cl = types.ModuleType("clip.clip")
    cl.build_model = model.build_model
    cl.tokenize = C.TABLES.tokenize  # REPLACED: the token table
    cl._MODELS = {"vit": "REPLACED: testdata/clip-tiny", "rn": "REPLACED: testdata/clip-rn-tiny"}
    sys.modules["clip.clip"] = cl
    clip_pkg.clip = cl
    tok = types.ModuleType("clip.simple_tokenizer")

    class SimpleTokenizer:
        def encode(self, text):
            return C.TABLES.ids(text)

    tok.SimpleTokenizer = SimpleTokenizer
    sys.modules["clip.simple_tokenizer"] = tok
    C.install_dassl()
    pl = C.load_module("plot_trainer", os.path.join(root, "trainers", "plot.py"))
    weights = {"vit": C.read_st(os.path.join(C.TESTDATA, "clip-tiny", "openai.safetensors"))[0],
               "rn": C.read_st(os.path.join(C.TESTDATA, "clip-rn-tiny", "openai.safetensors"))[0]}

    def vit_all_tokens(self, x):
        """REPLACED (ViT only): FLiP's VisionTransformer.forward, restated: ln_post and proj on
        every token, returned token-major [1 + M, b, d]."""
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        x = torch.cat([self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype,
                                                                      device=x.device), x], dim=1)
        x = x + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x)
        x = self.transformer(x.permute(1, 0, 2)).permute(1, 0, 2)
        x = self.ln_post(x) @ self.proj
        return x.permute(1, 0, 2)

    model.VisionTransformer.forward = vit_all_tokens

    def load_clip_to_cpu(cfg):
        """REPLACED: no download; the tiny CLIP of cfg.MODEL.BACKBONE.NAME through their
        build_model, float32 (their convert_weights rounds to fp16 and is skipped; 0-d tensors
        are stored as [1])."""
        sd = weights[cfg.MODEL.BACKBONE.NAME]
        w = {k: (v.reshape(()) if (k == "logit_scale" or k.endswith("num_batches_tracked")) else v.clone())
             for k, v in sd.items()}
        saved = model.convert_weights
        model.convert_weights = lambda m: None
        m = model.build_model(w)
        model.convert_weights = saved
        for k, v in m.state_dict().items():
            if not torch.equal(v, w[k]):
                raise SystemExit(f"weight {k} differs after loading")
        return m

    pl.load_clip_to_cpu = load_clip_to_cpu
    return pl


class TorchRecorder:
    """Stands in for `torch` inside their module: records the similarity their forward builds
    (`torch.einsum`) and passes everything else through."""

    def __init__(self):
        self.sim = None

    def __getattr__(self, name):
        fn = getattr(torch, name)
        if name == "device":
            # REPLACED: their ImageNet branch places the model on "cuda:0" / "cuda": CPU here
            return lambda spec, *a, **k: torch.device("cpu") if str(spec).startswith("cuda") else torch.device(spec, *a, **k)
        if name != "einsum":
            return fn

        def einsum(*a, **k):
            out = fn(*a, **k)
            self.sim = out.detach().clone()
            return out
        return einsum


def cfg_for(lr, dataset, backbone):
    return C.CN(
        TRAINER=C.CN(PLOT=C.CN(N_CTX=N_CTX, CSC=False, CTX_INIT="", PREC="fp32", CLASS_TOKEN_POSITION="end",
                               N=N_PROMPTS)),
        DATASET=C.CN(NAME=dataset),
        INPUT=C.CN(SIZE=(64, 64) if backbone == "rn" else (32, 32)),
        MODEL=C.CN(BACKBONE=C.CN(NAME=backbone), INIT_WEIGHTS=""),
        OPTIM=C.optim_cfg(lr, MOM, WD),
    )


def trainer(pl, classnames, lr, dataset, init=None, backbone="vit"):
    torch.manual_seed(SEED)
    t = pl.PLOT(cfg_for(lr, dataset, backbone), classnames)
    t.build_model()
    m = t.model
    if init is not None:
        with torch.no_grad():
            m.prompt_learner.ctx.copy_(init)
    t.set_model_mode("train")  # Dassl: the registered prompt learner only; CLIP stays in eval
    return t


def forward_parts(t, rec, images):
    """Their forward, recording features, sim, plan and the iteration count."""
    m = t.model
    plans = []
    inner = m.Sinkhorn

    def recording(K, u, v):
        n, T = sinkhorn_iterations_inner(inner, m, K, u, v)
        plans.append((T.detach().clone(), n, K.detach().clone()))
        return T

    m.Sinkhorn = recording
    try:
        with torch.no_grad():
            imf = m.image_encoder(images)
            tf = m.text_encoder(m.prompt_learner(), m.tokenized_prompts)
            logits = m(images)
    finally:
        del m.Sinkhorn
    return imf, tf, rec.sim, plans[0], logits


def sinkhorn_iterations_inner(fn, m, K, u, v):
    full = fn(K, u, v)
    keep = m.max_iter
    try:
        for k in range(1, keep + 1):
            m.max_iter = k
            if torch.equal(fn(K, u, v), full):
                return k, full
    finally:
        m.max_iter = keep
    raise SystemExit("Sinkhorn iteration count not found")


def step_file(t, rec, images, labels, tokens, meta, init):
    imf, tf, sim, (plan, iters, _), logits = forward_parts(t, rec, images)
    t.batch_idx, t.num_batches = 0, 1
    out = t.forward_backward({"img": images, "label": labels})
    m = t.model
    M, N, b, C = sim.shape  # their einsum 'mnbc'; their Sinkhorn sees it as [b*C, M, N]
    sim = sim.reshape(M, N, b * C).permute(2, 0, 1)
    return {"images": images, "labels": labels, "tokens": tokens,
            "image_features": imf, "text_features": tf, "sim": sim, "plan": plan, "logits": logits,
            "loss": torch.tensor([out["loss"]]),
            "grad.prompt_learner.ctx": m.prompt_learner.ctx.grad.detach().clone(),
            "step1.prompt_learner.ctx": m.prompt_learner.ctx.detach().clone()}, iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(C.TESTDATA, "plot"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    repo = C.mirror("PLOT_REF", "/work/.mirror/CHENGY12+PLOT/repo")
    step_in, rnd_in = C.promptfl_inputs()
    tokens = step_in["tokens"]
    classnames = C.register_classes(tokens)
    pl = install(repo)
    rec = TorchRecorder()
    pl.torch = rec
    meta = {"method": "plot", "n_prompts": N_PROMPTS, "n_ctx": N_CTX, "n_cls": len(classnames), "csc": "False",
            "eps": 0.1, "thresh": 0.01, "max_iter": 100, "marginals": "uniform: 1/M per local token, 1/N per prompt",
            "ot_stop": "after the iteration where mean |r - r_prev| over the whole batch < thresh",
            "plan_gradient": "none (computed under no_grad)", "logit_scale": 4.0, "momentum": MOM,
            "weight_decay": WD, "init_std": 0.02, "seed": SEED, "prec": "fp32",
            "class_token_position": "end", "x_token_id": C.X_ID,
            "dot_token_id": C.DOT_ID, "sot": C.SOT, "eot": C.EOT, "lr_scheduler": "constant",
            "text_batch": "prompt-major: text_features row n*C + c is prompt n for class c",
            "sim_layout": "sim and plan [b*C, M, N]: row b*C + c (image b, class c), entry (m, n) = local token m, prompt n"}
    os.makedirs(a.out, exist_ok=True)
    vit = dict(meta, clip="clip-tiny", image_tokens="image_features [1+M, b, d] token-major: ln_post and proj on "
               "every token (FLiP's ViT forward); token 0 = CLS (global), 1..16 the patches (local)")
    rn = dict(meta, clip="clip-rn-tiny", image_seed=IMAGE_SEED,
              image_tokens="image_features [1+M, b, d] token-major as their AttentionPool2d returns: token 0 the "
                           "mean query (global), 1..4 the local tokens of the 2x2 map (row-major)")
    labels = step_in["labels"]

    # ---- ViT (clip-tiny, patch tokens): init, step, step_imagenet, round
    t = trainer(pl, classnames, LR, "Caltech101")
    init = t.model.prompt_learner.ctx.detach().clone()
    C.write_st(os.path.join(a.out, "init.safetensors"), {"prompt_learner.ctx": init}, dict(vit, params="init"))
    images = step_in["images"]
    s, it = step_file(t, rec, images, labels, tokens, vit, init)
    C.write_st(os.path.join(a.out, "step.safetensors"), s,
               dict(vit, lr=LR, dataset="Caltech101", ot_iterations=it, params="init.safetensors",
                    logits="e^logit_scale * sum_mn plan*sim (local tokens only)"))
    t = trainer(pl, classnames, LR, "ImageNet", init)
    s, it = step_file(t, rec, images, labels, tokens, vit, init)
    C.write_st(os.path.join(a.out, "step_imagenet.safetensors"), s,
               dict(vit, lr=LR, dataset="ImageNet", ot_iterations=it, params="init.safetensors",
                    logits="e^logit_scale * (sum_mn plan*sim + cos(global image token, normalised mean of the N raw text features))"))
    rnd = {"tokens": tokens}
    trained, sizes, iters = [], [], []
    for c in range(2):
        t = trainer(pl, classnames, ROUND_LR, "Caltech101", init)
        ims, lbs = rnd_in[f"client{c}.images"], rnd_in[f"client{c}.labels"]
        rnd[f"client{c}.images"], rnd[f"client{c}.labels"] = ims, lbs
        nb = len(ims) // 4
        losses, its = [], []
        for b in range(nb):
            bi, bl = ims[4 * b:4 * b + 4], lbs[4 * b:4 * b + 4]
            its.append(forward_parts(t, rec, bi)[3][1])
            t.batch_idx, t.num_batches = b, nb
            losses.append(t.forward_backward({"img": bi, "label": bl})["loss"])
        rnd[f"client{c}.batch_losses"] = torch.tensor(losses)
        tr = t.model.prompt_learner.ctx.detach().clone()
        rnd[f"client{c}.trained.prompt_learner.ctx"] = tr
        trained.append(tr)
        sizes.append(len(ims))
        iters.append(its)
    n = sum(sizes)
    rnd["global.prompt_learner.ctx"] = sum(tr * (ni / n) for tr, ni in zip(trained, sizes))
    C.write_st(os.path.join(a.out, "round.safetensors"), rnd,
               dict(vit, lr=ROUND_LR, dataset="Caltech101", batch_size=4, local_epochs=1, client_sizes=sizes,
                    ot_iterations_per_batch=iters, aggregated="prompt_learner.ctx (all N prompts)", local="[]"))

    # ---- ResNet (clip-rn-tiny, the authors' own encoder): rn_init, rn_step
    # REPLACED: data — promptfl's labels with new 64x64 images (clip-rn-tiny's input size)
    g = torch.Generator().manual_seed(IMAGE_SEED)
    rimages = torch.randn(6, 3, 64, 64, generator=g)
    t = trainer(pl, classnames, LR, "Caltech101", backbone="rn")
    rinit = t.model.prompt_learner.ctx.detach().clone()
    C.write_st(os.path.join(a.out, "rn_init.safetensors"), {"prompt_learner.ctx": rinit}, dict(rn, params="rn_init"))
    s, it = step_file(t, rec, rimages, labels, tokens, rn, rinit)
    C.write_st(os.path.join(a.out, "rn_step.safetensors"), s,
               dict(rn, lr=LR, dataset="Caltech101", ot_iterations=it, params="rn_init.safetensors",
                    logits="e^logit_scale * sum_mn plan*sim (local tokens only)"))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
