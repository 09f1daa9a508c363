"""MaPLe reference fixtures on the tiny CLIP, made by running the authors' code.

Runs muzairkhattak/multimodal-prompt-learning (trainers/maple.py: MultiModalPromptLearner,
TextEncoder, CustomCLIP, the MaPLe trainer's build_model parameter selection and its fp32
forward_backward; clip/model.py: CLIP, VisionTransformer_MaPLe, ResidualAttentionBlock_MaPLe,
build_model) in float32 on CPU. What cannot run here is replaced, each replacement listed in
reference/maple/README.md and marked REPLACED below.

Usage: python3 make_fixture.py --ref <dir with the authors' repo files> --out testdata/maple
(see the Makefile target fixtures-maple, which extracts the files from the fetched mirror).
"""
import argparse
import copy
import os
import sys
import types

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import st  # noqa: E402

N_CTX = 2
DEPTH = 3  # prompt depth J (tiny CLIP has 4 blocks; the paper's ViT-B/16 uses 9 of 12)
X_ID, DOT_ID, SOT, EOT = 343, 269, 998, 999
SEED = 23


def patch_sources(ref, dst):
    """Copies the authors' files, removing the fp16 casts (REPLACED: precision fp32)."""
    os.makedirs(os.path.join(dst, "clip"), exist_ok=True)
    os.makedirs(os.path.join(dst, "trainers"), exist_ok=True)
    edits = {
        "clip/model.py": [
            # ResidualAttentionBlock_MaPLe (vision and text deep prompts) and
            # VisionTransformer_MaPLe (shallow visual prompt) cast prompts with .half().
            (".permute(1, 0, 2).half()", ".permute(1, 0, 2)", 4),  # 2 in IVLP blocks, unused
            ("shared_ctx.expand(x.shape[0], -1, -1).half()", "shared_ctx.expand(x.shape[0], -1, -1)", 1),
        ],
        "trainers/maple.py": [
            ("        self.proj.half()\n", "", 1),
            # REPLACED: the hard-coded ViT-B/16 widths (512 text, 768 vision) by the tiny CLIP's.
            ("nn.Linear(ctx_dim, 768)", "nn.Linear(ctx_dim, clip_model.visual.conv1.weight.shape[0])", 2),
            ("torch.empty(n_ctx, 512)", "torch.empty(n_ctx, ctx_dim)", 1),
        ],
    }
    for rel, subs in edits.items():
        src = open(os.path.join(ref, rel)).read()
        for old, new, count in subs:
            got = src.count(old)
            if got != count:
                raise SystemExit(f"{rel}: expected {count} occurrence(s) of {old!r}, found {got}")
            src = src.replace(old, new)
        with open(os.path.join(dst, rel), "w") as f:
            f.write(src)
    open(os.path.join(dst, "clip", "__init__.py"), "w").close()
    open(os.path.join(dst, "trainers", "__init__.py"), "w").close()


def install_stubs(token_table):
    """REPLACED: Dassl (not installed; only its registry decorator and TrainerX base are
    touched at import), clip.clip (weights download, BPE tokenizer) and the BPE
    SimpleTokenizer (name_lens only, unused with class token position 'end')."""
    dassl = types.ModuleType("dassl")
    engine = types.ModuleType("dassl.engine")

    class _Registry:
        def register(self):
            return lambda cls: cls

    class TrainerX:  # the methods MaPLe overrides are called directly below
        pass

    engine.TRAINER_REGISTRY = _Registry()
    engine.TrainerX = TrainerX
    metrics = types.ModuleType("dassl.metrics")
    metrics.compute_accuracy = None
    utils = types.ModuleType("dassl.utils")
    utils.load_pretrained_weights = None
    utils.load_checkpoint = None
    optim = types.ModuleType("dassl.optim")
    optim.build_optimizer = None
    optim.build_lr_scheduler = None
    for name, mod in [("dassl", dassl), ("dassl.engine", engine), ("dassl.metrics", metrics),
                      ("dassl.utils", utils), ("dassl.optim", optim)]:
        sys.modules[name] = mod

    clipmod = types.ModuleType("clip.clip")

    def tokenize(text):
        return torch.tensor(token_table[text], dtype=torch.long).unsqueeze(0)

    clipmod.tokenize = tokenize
    tok = types.ModuleType("clip.simple_tokenizer")

    class SimpleTokenizer:
        def encode(self, name):
            return [0] * len(name.split())

    tok.SimpleTokenizer = SimpleTokenizer
    import clip as clippkg  # the authors' package (empty __init__ here)
    clippkg.clip = clipmod
    sys.modules["clip.clip"] = clipmod
    sys.modules["clip.simple_tokenizer"] = tok


def make_tokens(promptfl_tokens):
    """Rows 'SOT X×n_ctx class... . EOT 0…' from promptfl's rows (which have 4 X)."""
    rows = []
    for r in promptfl_tokens:
        body = [int(t) for t in r[5:] if t != 0]
        row = [SOT] + [X_ID] * N_CTX + body
        rows.append(row + [0] * (77 - len(row)))
    return np.array(rows, dtype=np.int64)


def cfg_for():
    c = types.SimpleNamespace()
    c.TRAINER = types.SimpleNamespace(MAPLE=types.SimpleNamespace(
        N_CTX=N_CTX, CTX_INIT="", PREC="fp32", PROMPT_DEPTH=DEPTH))
    c.INPUT = types.SimpleNamespace(SIZE=(32, 32))
    c.MODEL = types.SimpleNamespace(BACKBONE=types.SimpleNamespace(NAME="tiny"), INIT_WEIGHTS="")
    return c


def build(model_mod, maple_mod, weights, classnames):
    """REPLACED load_clip_to_cpu: the tiny CLIP through their build_model with the design
    details their loader passes, without convert_weights (fp16) and without the download."""
    design = {"trainer": "MaPLe", "vision_depth": 0, "language_depth": 0, "vision_ctx": 0,
              "language_ctx": 0, "maple_length": N_CTX}
    saved = model_mod.convert_weights
    model_mod.convert_weights = lambda m: None
    sd = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
    sd["logit_scale"] = sd["logit_scale"].reshape(())  # stored as [1]; CLIP's is a scalar
    clip_model = model_mod.build_model(sd, design)
    model_mod.convert_weights = saved
    for k, v in clip_model.state_dict().items():
        if not torch.equal(v, sd[k]):
            raise SystemExit(f"weight {k} differs after loading")
    clip_model.float()  # the trainer's fp32 branch
    torch.manual_seed(SEED)
    model = maple_mod.CustomCLIP(cfg_for(), classnames, clip_model)
    # MaPLe.build_model: only prompt_learner parameters are trained
    for name, p in model.named_parameters():
        p.requires_grad_("prompt_learner" in name or "VPT" in name)
    return model


def learner_params(model):
    return {"prompt_learner." + k: v for k, v in model.prompt_learner.named_parameters()}


def snapshot(model, prefix=""):
    return {prefix + k: v.detach().numpy().copy() for k, v in learner_params(model).items()}


def sgd(model, lr):
    # REPLACED Dassl build_optimizer(model, OPTIM) by the call it makes for NAME sgd
    # (dampening 0, nesterov False); only parameters with requires_grad receive gradients.
    # Scheduler: constant lr (single_step, gamma 1).
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr,
                           momentum=0.9, weight_decay=5e-4, dampening=0, nesterov=False)


def forward_backward(model, optim, image, label):
    """MaPLe.forward_backward, PREC fp32 branch."""
    loss = model(image, label)
    optim.zero_grad()
    loss.backward()
    optim.step()
    return loss.item()


def main():
    global DEPTH
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--testdata", required=True)
    ap.add_argument("--work", default="/tmp/maple-ref")
    a = ap.parse_args()
    torch.set_num_threads(1)

    patch_sources(a.ref, a.work)
    sys.path.insert(0, a.work)
    pf, _ = st.load(os.path.join(a.testdata, "promptfl", "step.safetensors"))
    pr, _ = st.load(os.path.join(a.testdata, "promptfl", "round.safetensors"))
    weights, _ = st.load(os.path.join(a.testdata, "clip-tiny", "openai.safetensors"))
    tokens = make_tokens(pf["tokens"])
    classnames = [f"class{i}" for i in range(len(tokens))]
    prefix = " ".join(["X"] * N_CTX)
    table = {f"{prefix} {c}.": list(tokens[i]) for i, c in enumerate(classnames)}
    install_stubs(table)
    from clip import model as model_mod
    from trainers import maple as maple_mod

    meta = {"method": "maple", "n_ctx": N_CTX, "prompt_depth": DEPTH, "n_cls": len(tokens),
            "x_token_id": X_ID, "dot_token_id": DOT_ID, "sot": SOT, "eot": EOT,
            "logit_scale": 4.0, "momentum": 0.9, "weight_decay": 0.0005, "init_std": 0.02,
            "seed": SEED, "prec": "fp32", "class_token_position": "end",
            "visual_prompt_position": "appended after the patch tokens, before ln_pre, no positional embedding"}
    out = os.path.join(a.testdata, "maple")
    os.makedirs(out, exist_ok=True)

    # --- step ---
    model = build(model_mod, maple_mod, weights, classnames)
    model.train()
    init = snapshot(model)
    st.save(os.path.join(out, "init.safetensors"), init, dict(meta, params="init"))
    images = torch.from_numpy(pf["images"])
    labels = torch.from_numpy(pf["labels"])
    pl = model.prompt_learner
    prompts, shared_ctx, deep_text, deep_vis = pl()
    text_features = model.text_encoder(prompts, model.tokenized_prompts, deep_text)
    image_features = model.image_encoder(images, shared_ctx, deep_vis)
    ifn = image_features / image_features.norm(dim=-1, keepdim=True)
    tfn = text_features / text_features.norm(dim=-1, keepdim=True)
    logits = model.logit_scale.exp() * ifn @ tfn.t()
    optim = sgd(model, 0.001)
    loss_ref = model(images, labels)  # the reference's own training forward (the loss)
    optim.zero_grad()
    loss_ref.backward()
    grads = {"grad." + k: v.grad.numpy().copy() for k, v in learner_params(model).items()}
    optim.step()
    step = {"images": pf["images"], "labels": pf["labels"], "tokens": tokens,
            "image_features": image_features.detach().numpy(),
            "text_features": text_features.detach().numpy(),
            "logits": logits.detach().numpy(), "loss": np.array([loss_ref.item()], np.float32),
            "visual_prompt.0": shared_ctx.detach().numpy()}
    for k, v in enumerate(deep_vis):
        step[f"visual_prompt.{k + 1}"] = v.detach().numpy()
    step.update(grads)
    step.update(snapshot(model, "step1."))
    st.save(os.path.join(out, "step.safetensors"), step,
            dict(meta, lr=0.001, params="init.safetensors"))

    # --- round: two clients from init, FedAvg of the whole prompt learner ---
    rnd = {"tokens": tokens}
    trained = []
    sizes = []
    for c in range(2):
        model = build(model_mod, maple_mod, weights, classnames)
        model.prompt_learner.load_state_dict(
            {k[len("prompt_learner."):]: torch.from_numpy(v) for k, v in init.items()}, strict=False)
        model.train()
        optim = sgd(model, 0.01)
        ims, lbs = pr[f"client{c}.images"], pr[f"client{c}.labels"]
        rnd[f"client{c}.images"], rnd[f"client{c}.labels"] = ims, lbs
        losses = []
        for b in range(0, len(ims), 4):
            losses.append(forward_backward(model, optim, torch.from_numpy(ims[b:b + 4]),
                                           torch.from_numpy(lbs[b:b + 4])))
        rnd[f"client{c}.batch_losses"] = np.array(losses, np.float32)
        tr = snapshot(model)
        trained.append(copy.deepcopy(tr))
        sizes.append(len(ims))
        for k, v in tr.items():
            rnd[f"client{c}.trained.{k}"] = v
    # FedAvg (fed_utils.average_weights restated): weights n_i / n, every learner tensor.
    n = sum(sizes)
    for k in trained[0]:
        acc = torch.zeros_like(torch.from_numpy(trained[0][k]))
        for tr, ni in zip(trained, sizes):
            acc += torch.from_numpy(tr[k]) * (ni / n)
        rnd["global." + k] = acc.numpy()
    st.save(os.path.join(out, "round.safetensors"), rnd,
            dict(meta, lr=0.01, batch_size=4, local_epochs=1, client_sizes=sizes,
                 aggregated=",".join(sorted(trained[0])), local="[]"))

    # --- every block prompted (J = the model's 4 blocks): the last, pooled
    # block's input carries replaced prompt rows ---
    DEPTH = 4
    meta4 = dict(meta, prompt_depth=DEPTH)
    model = build(model_mod, maple_mod, weights, classnames)
    model.train()
    init4 = snapshot(model)
    st.save(os.path.join(out, "init_j4.safetensors"), init4, dict(meta4, params="init_j4"))
    pl = model.prompt_learner
    prompts, shared_ctx, deep_text, deep_vis = pl()
    text_features = model.text_encoder(prompts, model.tokenized_prompts, deep_text)
    image_features = model.image_encoder(images, shared_ctx, deep_vis)
    ifn = image_features / image_features.norm(dim=-1, keepdim=True)
    tfn = text_features / text_features.norm(dim=-1, keepdim=True)
    logits = model.logit_scale.exp() * ifn @ tfn.t()
    optim = sgd(model, 0.001)
    loss_ref = model(images, labels)
    optim.zero_grad()
    loss_ref.backward()
    grads = {"grad." + k: v.grad.numpy().copy() for k, v in learner_params(model).items()}
    optim.step()
    step = {"images": pf["images"], "labels": pf["labels"], "tokens": tokens,
            "image_features": image_features.detach().numpy(),
            "text_features": text_features.detach().numpy(),
            "logits": logits.detach().numpy(), "loss": np.array([loss_ref.item()], np.float32),
            "visual_prompt.0": shared_ctx.detach().numpy()}
    for k, v in enumerate(deep_vis):
        step[f"visual_prompt.{k + 1}"] = v.detach().numpy()
    step.update(grads)
    step.update(snapshot(model, "step1."))
    st.save(os.path.join(out, "step_j4.safetensors"), step,
            dict(meta4, lr=0.001, params="init_j4.safetensors"))
    print("wrote", out)


if __name__ == "__main__":
    main()
