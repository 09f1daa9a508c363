"""CLIP-LoRA reference fixtures (testdata/clip_lora) made by running the authors' code.

Runs MaxZanella/CLIP-LoRA (commit 358f0d7): loralib/utils.py (apply_lora with encoder
"both", position "all", params q k v, r 2, alpha 1; mark_only_lora_as_trainable;
get_lora_parameters), loralib/layers.py (PlainMultiheadAttentionLoRA, LinearLoRA,
LoRALayer: scaling alpha/sqrt(r), A Kaiming-uniform, B zero) over the repository's own
clip/model.py, and the training step of lora.py's run_lora (text and image features
re-encoded with LoRA at every step, both L2-normalised, logits = logit_scale·cos, cross
entropy, the authors' AdamW(get_lora_parameters, weight_decay 1e-2, betas (0.9, 0.999))),
on the tiny CLIP of testdata/clip-tiny, float32, CPU. Federated as the pFedMMA paper runs
its baselines (CLIP-LoRA has no federated code): every client starts from the global
factors, one local epoch with a fresh optimizer (the federated baselines' SGD, momentum
0.9, weight decay 5e-4), and the server averages A and B separately with the pFedMMA
authors' fed_utils.average_weights (weights n_i / n).

What cannot run here is replaced, each replacement marked REPLACED below and listed in
reference/cliplora/README.md:
- torch 2's F.scaled_dot_product_attention, F._canonical_mask and F._none_or_dtype, which
  PlainMultiheadAttentionLoRA calls, are added to Debian's torch 1.13 (their math
  definitions; no dropout: the module's own dropout is 0);
- dropout: the masks are random and torch's stream is not pfedmma's; the LoRA layers
  are built with the authors' default dropout_rate 0.25 (LinearLoRA's Dropout path:
  W x + s·(B A) dropout(x)) and each Dropout's p is then set to 0 (the identity mask).
  dropout_rate 0 would take LinearLoRA's merge path, whose backward is wrong (the
  weight's .data is restored after the forward, so the gradient to the layer's input
  uses W without s·B·A);
- lora.py's run_lora is restated for one step (its body: the data loaders, the
  evaluation, the fp16 autocast and GradScaler, the per-iteration cosine schedule left
  out: float32, a constant rate);
- main.py's logit_scale = 100 (CLIP's e^4.6052) is the tiny CLIP's e^4;
- clip.load / clip.tokenize: the tiny CLIP (common.load_clip_to_cpu) and the token table
  of common.TABLES ("a photo of a class<i>.", as clip_adapter/);
- fed_utils.average_weights runs from its source alone (as clip_adapter/).

Files: init (the authors' init: B = 0, so A has no gradient) with step (AdamW, lr 2e-4);
init_rand (A from init, B = 0.1·N(0, 1)) with step_rand (AdamW), and the same as
init_rand_sgd with step_rand_sgd (SGD);
round (two clients from init_rand, SGD). Usage: python3
reference/cliplora/make_fixture.py  (make fixtures-external)
"""
import copy
import math
import os
import sys
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "91"))
ADAM_LR = float(os.environ.get("PFX_LR", "2e-4"))  # the authors' --lr
SGD_LR = float(os.environ.get("PFX_SGD_LR", "0.01"))
ROUND_LR = float(os.environ.get("PFX_ROUND_LR", "0.01"))
ADAM_WD = 1e-2  # lora.py's AdamW
MOM, WD = 0.9, 5e-4  # the federated baselines' SGD
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "clip_lora"))
WORDS = {"a": [320], "photo": [125], "of": [539]}
TEMPLATE = "a photo of a {}."
FILES = ["loralib/__init__.py", "loralib/layers.py", "loralib/utils.py"]


def torch2_attention():
    """REPLACED: torch 2's functional attention pieces on torch 1.13 (math definition)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        if dropout_p > 0 or is_causal:
            raise SystemExit("sdpa stand-in: dropout and is_causal are not used here")
        w = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            w = w.masked_fill(attn_mask.logical_not(), float("-inf")) if attn_mask.dtype == torch.bool else w + attn_mask
        return torch.softmax(w, dim=-1) @ v

    def canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
        if mask is not None and mask.dtype == torch.bool:
            return torch.zeros_like(mask, dtype=target_type).masked_fill_(mask, float("-inf"))
        return mask

    F.scaled_dot_product_attention = sdpa
    F._canonical_mask = canonical_mask
    F._none_or_dtype = lambda x: None if x is None else x.dtype


def average_weights_fn(pfedmma):
    src = C.git_show(pfedmma, "fed_utils.py")
    a = src.index("def average_weights(")
    b = src.index("\ndef ", a + 1)
    ns = {"copy": copy, "torch": torch}
    exec(compile(src[a:b], "fed_utils.py:average_weights", "exec"), ns)
    return ns["average_weights"]


def go_name(torch_name):
    """transformer.resblocks.3.attn.q_proj.w_lora_A -> lora.text.3.q.A (visual.… -> lora.visual.…)."""
    parts = torch_name.split(".")
    tower = "visual" if parts[0] == "visual" else "text"
    if tower == "visual":
        parts = parts[1:]
    assert parts[0] == "transformer" and parts[1] == "resblocks" and parts[3] == "attn", torch_name
    return f"lora.{tower}.{parts[2]}.{parts[4][0]}.{parts[5][-1]}"


def build(utils, state=None):
    """The tiny CLIP with the authors' LoRA (apply_lora, mark_only_lora_as_trainable)."""
    clip_model = C.load_clip_to_cpu()
    args = types.SimpleNamespace(encoder="both", position="all", backbone="ViT-B/16", params=["q", "k", "v"],
                                 r=2, alpha=1, dropout_rate=0.25)
    torch.manual_seed(SEED)
    layers = utils.apply_lora(args, clip_model)
    # REPLACED: the masks are random (torch's stream is not pfedmma's): their default
    # dropout_rate 0.25 builds the Dropout path of LinearLoRA.forward, and p = 0 makes
    # its mask the identity. (dropout_rate 0 would take the merge path, whose backward
    # is wrong: see reference/cliplora/README.md.)
    for mha in layers:
        for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
            proj.dropout.p = 0.0
    utils.mark_only_lora_as_trainable(clip_model)
    if state is not None:
        named = dict(clip_model.named_parameters())
        with torch.no_grad():
            for k, v in state.items():
                named[k].copy_(v)
    return clip_model


def lora_params(clip_model):
    return {n: p for n, p in clip_model.named_parameters() if p.requires_grad}


def snapshot(clip_model, prefix=""):
    return {prefix + go_name(n): p.detach().clone() for n, p in lora_params(clip_model).items()}


def train_step(clip_model, optimizer, tokens, images, labels, logit_scale):
    """One iteration of run_lora's loop (encoder 'both'), float32."""
    clip_model.train()
    class_embeddings = clip_model.encode_text(tokens)
    text_features = class_embeddings / class_embeddings.norm(dim=-1, keepdim=True)
    image_features = clip_model.encode_image(images)
    image_features = image_features / image_features.norm(dim=-1, keepdim=True)
    cosine_similarity = logit_scale * image_features @ text_features.t()
    loss = F.cross_entropy(cosine_similarity, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss, cosine_similarity.detach(), class_embeddings.detach(), image_features


def main():
    repo = C.mirror("CLIPLORA_REF", "/work/.mirror/MaxZanella+CLIP-LoRA/repo")
    pfedmma = C.mirror("PFEDMMA_REF", "/work/.mirror/sajjad-ucsb+pFedMMA/repo")
    torch2_attention()
    C.import_reference(repo, FILES, clip_dir="clip")
    from loralib import utils
    average_weights = average_weights_fn(pfedmma)
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    C.TABLES.words.update(WORDS)
    tokens = C.TABLES.tokenize([TEMPLATE.format(n) for n in names])
    logit_scale = math.exp(4.0)

    model = build(utils)
    init = snapshot(model)
    trainable = lora_params(model)
    if len(trainable) != 2 * 3 * 8 or any("lora_" not in n for n in trainable):
        sys.exit(f"trainable parameters: {sorted(trainable)}")
    g = torch.Generator().manual_seed(SEED + 1)
    init_rand = {k: (v if k.endswith(".A") else 0.1 * torch.randn(v.shape, generator=g)) for k, v in init.items()}
    to_torch = {go_name(n): n for n in trainable}
    meta = {"method": "clip_lora", "rank": 2, "alpha": 1, "scale": "sqrt", "dropout": 0, "aggregate": "ab",
            "template": TEMPLATE, "logit_scale": 4.0, "seed": SEED, "prec": "fp32",
            "reference": "MaxZanella/CLIP-LoRA 358f0d7 loralib + lora.py run_lora step; pFedMMA fed_utils.average_weights"}
    C.write_st(os.path.join(OUT, "init.safetensors"), init, {"method": "clip_lora", "seed": SEED, "init": "the authors' (B = 0)"})
    for suffix in ["", "_sgd"]:  # init_rand_sgd: step_rand_sgd's (the step contract pairs step<x> with init<x>)
        C.write_st(os.path.join(OUT, f"init_rand{suffix}.safetensors"), init_rand,
                   {"method": "clip_lora", "seed": SEED + 1, "init": "A of init, B = 0.1·N(0, 1)"})

    cases = [("step", init, "init.safetensors", "adamw"), ("step_rand", init_rand, "init_rand.safetensors", "adamw"),
             ("step_rand_sgd", init_rand, "init_rand_sgd.safetensors", "sgd")]
    for name, p0, params, opt_name in cases:
        model = build(utils, {to_torch[k]: v for k, v in p0.items()})
        lp = lora_params(model)
        if opt_name == "adamw":  # lora.py: AdamW(get_lora_parameters(clip_model), weight_decay=1e-2, betas, lr)
            opt = torch.optim.AdamW(utils.get_lora_parameters(model), weight_decay=ADAM_WD, betas=(0.9, 0.999), lr=ADAM_LR)
            hyper = {"optimizer": "adamw", "lr": ADAM_LR, "weight_decay": ADAM_WD, "momentum": 0, "betas": "0.9,0.999", "eps": 1e-8}
        else:
            opt = torch.optim.SGD(utils.get_lora_parameters(model), lr=SGD_LR, momentum=MOM, weight_decay=WD)
            hyper = {"optimizer": "sgd", "lr": SGD_LR, "weight_decay": WD, "momentum": MOM}
        loss, logits, txt, _ = train_step(model, opt, tokens, step["images"], step["labels"], logit_scale)
        out = {"images": step["images"], "labels": step["labels"], "tokens": tokens, "logits": logits,
               "text_features": txt, "loss": loss.detach().reshape(1)}
        for n, p in lp.items():
            out["grad." + go_name(n)] = p.grad.detach().clone()
        out.update(snapshot(model, "step1."))
        C.write_st(os.path.join(OUT, name + ".safetensors"), out, {**meta, **hyper, "params": params})

    # --- round: two clients from init_rand, SGD, FedAvg (n_i / n) of A and B separately ---
    res = {"tokens": tokens}
    local, sizes = [], []
    for ci in range(2):
        ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
        model = build(utils, {to_torch[k]: v for k, v in init_rand.items()})
        opt = torch.optim.SGD(utils.get_lora_parameters(model), lr=ROUND_LR, momentum=MOM, weight_decay=WD)
        losses = []
        for b in range(0, len(lab), 4):
            loss, _, _, _ = train_step(model, opt, tokens, ims[b:b + 4], lab[b:b + 4], logit_scale)
            losses.append(loss.item())
        res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
        res[f"client{ci}.batch_losses"] = torch.tensor(losses)
        tr = snapshot(model)
        for k, v in tr.items():
            res[f"client{ci}.trained.{k}"] = v
        local.append(copy.deepcopy(tr))
        sizes.append(len(lab))
    for k, v in average_weights(local, [0, 1], sizes).items():
        res["global." + k] = v
    C.write_st(os.path.join(OUT, "round.safetensors"), res,
               {**meta, "optimizer": "sgd", "lr": ROUND_LR, "momentum": MOM, "weight_decay": WD, "batch_size": 4,
                "local_epochs": 1, "client_sizes": str(sizes), "params": "init_rand.safetensors",
                "aggregation": "pFedMMA fed_utils.average_weights (n_i / n) of A and B separately", "local": "[]"})
    print("clip_lora fixtures written to", OUT)


if __name__ == "__main__":
    main()
