"""CLIP-Adapter reference fixtures (testdata/clip_adapter) made by running the authors' code.

Runs gaopengcuhk/CLIP-Adapter (clip_adapter.py, commit 08d07f8: Adapter, TextEncoder,
CustomCLIP, the CLIP_Adapter trainer's build_model — its parameter freezing and
build_optimizer(model.adapter) — and forward_backward) over OpenAI's clip/model.py as
shipped in KaiyangZhou/CoOp (the tree the authors' README runs it in), Dassl's real
build_optimizer / build_lr_scheduler and TrainerBase (common.py), on the tiny CLIP of
testdata/clip-tiny, float32, CPU. Federated as the pFedMMA paper runs its baselines:
every client starts a round from the global adapter, trains one local epoch with a fresh
optimizer, and the server averages both matrices with the pFedMMA authors'
fed_utils.average_weights (weights n_i / n, sajjad-ucsb/pFedMMA).

What cannot run here is replaced, each replacement marked REPLACED below and listed in
reference/clipadapter/README.md:
- CustomCLIP builds Adapter(1024, 4) (RN50's feature width); the tiny CLIP's features
  are 64-wide: Adapter(clip_model.text_projection.shape[1], 4), the authors' class;
- TextEncoder moves the prompt tokens to 'cuda': they stay on the CPU;
- load_clip_to_cpu (downloads OpenAI's weights): the tiny CLIP (common.load_clip_to_cpu);
- clip.tokenize: a token table (common.TABLES) giving "a photo of a class<i>." the rows
  SOT 320 125 539 320 <class ids> 269 EOT (the tiny vocabulary has 1000 ids; "photo"
  gets the synthetic id 125);
- Dassl's data loaders: the batches are given in the stored order (4 per batch in the
  round, the whole step batch at once); DATASET.NAME Caltech101 picks the template
  "a photo of a {}.";
- fed_utils.average_weights is executed from its source alone (the module imports
  prettytable, scipy and sklearn, which the function does not use).

Usage: python3 reference/clipadapter/make_fixture.py  (make fixtures-external)
"""
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "71"))
LR = float(os.environ.get("PFX_LR", "0.01"))
ROUND_LR = float(os.environ.get("PFX_ROUND_LR", "0.05"))
MOM, WD = 0.9, 5e-4
RATIO, REDUCTION = 0.2, 4  # CustomCLIP.forward's ratio, Adapter's default reduction
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "clip_adapter"))
WORDS = {"a": [320], "photo": [125], "of": [539]}


def average_weights_fn(pfedmma):
    """The pFedMMA authors' fed_utils.average_weights, executed from its source."""
    src = C.git_show(pfedmma, "fed_utils.py")
    a = src.index("def average_weights(")
    b = src.index("\ndef ", a + 1)
    ns = {"copy": copy, "torch": torch}
    exec(compile(src[a:b], "fed_utils.py:average_weights", "exec"), ns)
    return ns["average_weights"]


def import_clip_adapter(repo):
    root = C.import_reference(C.mirror("COOP_REF", "/work/.mirror/KaiyangZhou+CoOp/repo"), [], clip_dir="clip")
    path = os.path.join(root, "clip_adapter.py")
    src = C.git_show(repo, "clip_adapter.py")
    for old, new in [
        # REPLACED: RN50's 1024-wide features -> the backbone's width (the authors' class)
        ("self.adapter = Adapter(1024, 4).to(clip_model.dtype)",
         "self.adapter = Adapter(clip_model.text_projection.shape[1], 4).to(clip_model.dtype)"),
        # REPLACED: no GPU
        ("prompts = prompts.to('cuda')", "prompts = prompts.to('cpu')"),
    ]:
        if src.count(old) != 1:
            sys.exit(f"clip_adapter.py: expected one {old!r}")
        src = src.replace(old, new)
    with open(path, "w") as f:
        f.write(src)
    mod = C.load_module("clip_adapter_ref", path)
    mod.load_clip_to_cpu = C.load_clip_to_cpu  # REPLACED: the tiny CLIP
    return mod


def trainer(mod, classnames, lr):
    cfg = C.CN(DATASET=C.CN(NAME="Caltech101"), MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
               OPTIM=C.optim_cfg(lr, MOM, WD))
    t = mod.CLIP_Adapter(cfg, classnames)
    t.build_model()
    return t


def adapter_params(t):
    return {"adapter." + k: v.detach().clone() for k, v in t.model.adapter.named_parameters()}


def main():
    repo = C.mirror("CLIPADAPTER_REF", "/work/.mirror/gaopengcuhk+CLIP-Adapter/repo")
    pfedmma = C.mirror("PFEDMMA_REF", "/work/.mirror/sajjad-ucsb+pFedMMA/repo")
    mod = import_clip_adapter(repo)
    average_weights = average_weights_fn(pfedmma)
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    C.TABLES.words.update(WORDS)
    tokens = torch.cat([C.TABLES.tokenize(mod.CUSTOM_TEMPLATES["Caltech101"].format(n)) for n in names])

    torch.manual_seed(SEED)
    t = trainer(mod, names, LR)
    trainable = sorted(n for n, p in t.model.named_parameters() if p.requires_grad)
    if trainable != ["adapter.fc.0.weight", "adapter.fc.2.weight"]:
        sys.exit(f"trainable parameters {trainable}")
    init = adapter_params(t)
    meta = {"method": "clip_adapter", "ratio": RATIO, "reduction": REDUCTION, "n_cls": len(names),
            "template": mod.CUSTOM_TEMPLATES["Caltech101"], "logit_scale": 4.0, "momentum": MOM,
            "weight_decay": WD, "seed": SEED, "prec": "fp32", "init": "nn.Linear default (torch.manual_seed(seed))",
            "reference": "gaopengcuhk/CLIP-Adapter 08d07f8 clip_adapter.py; KaiyangZhou/CoOp clip/model.py"}
    C.write_st(os.path.join(OUT, "init.safetensors"), init, {"method": "clip_adapter", "seed": SEED})

    # --- step: the trainer's forward_backward on the whole batch ---
    m = t.model
    images, labels = step["images"], step["labels"]
    with torch.no_grad():
        imf = m.image_encoder(images)
        adapted = RATIO * m.adapter(imf) + (1 - RATIO) * imf
        txt = m.text_encoder()
        logits = m(images)
    t.set_model_mode("train")
    t.batch_idx, t.num_batches = 0, 1
    summ = t.forward_backward({"img": images, "label": labels})
    out = {"images": images, "labels": labels, "tokens": tokens, "image_features": imf,
           "adapted_features": adapted, "text_features": txt, "logits": logits,
           "loss": torch.tensor([summ["loss"]])}
    for k, p in t.model.adapter.named_parameters():
        out["grad.adapter." + k] = p.grad.detach().clone()
        out["step1.adapter." + k] = p.detach().clone()
    C.write_st(os.path.join(OUT, "step.safetensors"), out, {**meta, "lr": LR, "params": "init.safetensors"})

    # --- round: two clients from init, FedAvg (n_i / n) of the adapter ---
    res = {"tokens": tokens}
    local, sizes = [], []
    for ci in range(2):
        ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
        tc = trainer(mod, names, ROUND_LR)
        tc.model.adapter.load_state_dict({k[len("adapter."):]: v for k, v in init.items()})
        tc.set_model_mode("train")
        nb = (len(lab) + 3) // 4
        tc.num_batches, losses = nb, []
        for b in range(nb):
            tc.batch_idx = b
            losses.append(tc.forward_backward({"img": ims[4 * b:4 * b + 4], "label": lab[4 * b:4 * b + 4]})["loss"])
        res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
        res[f"client{ci}.batch_losses"] = torch.tensor(losses)
        tr = adapter_params(tc)
        for k, v in tr.items():
            res[f"client{ci}.trained.{k}"] = v
        local.append(copy.deepcopy(tr))
        sizes.append(len(lab))
    glob = average_weights(local, [0, 1], sizes)
    for k, v in glob.items():
        res["global." + k] = v
    C.write_st(os.path.join(OUT, "round.safetensors"), res,
               {**meta, "lr": ROUND_LR, "batch_size": 4, "local_epochs": 1, "client_sizes": str(sizes),
                "params": "init.safetensors", "aggregated": ",".join(sorted(glob)),
                "aggregation": "pFedMMA fed_utils.average_weights (n_i / n)", "local": "[]"})
    print("clip_adapter fixtures written to", OUT)


if __name__ == "__main__":
    main()
