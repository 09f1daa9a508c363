"""FedMVP reference fixtures (testdata/fedmvp) made by running the authors' code.

Runs mainaksingha01/FedMVP (commit 246800e): model/FedMVP.py (FedMVP, ImageEncoder,
PromptLearner, CrossAttention, PreNorm, FeedForward, GEGLU, CrossLoRAparams,
compute_description_encodings), model/descriptors.py (load_gpt_descriptions),
federated/client.py (Client.build_model, train — with its LoRA switch —,
forward_backward), federated/base_trainer.py (TrainerBase) and federated/utils.py
(build_optimizer, build_lr_scheduler) on the tiny CLIP of testdata/clip-tiny through
the repository's own clip/model.py, in float32 on CPU. What cannot run here is
replaced, each replacement marked REPLACED below and listed in reference/fedmvp/README.md
(fixture section):

- sources are read from the git mirror (FEDMVP_REF) into a temporary directory;
- the ViT-B/16 widths hard-coded in FedMVP.py (768 vision, 512 text features)
  become the tiny CLIP's (128, 64);
- the fp16 casts (crossattn.half(), linear.half()) are dropped: float32;
- FedMVP.__init__ never builds the self.image_encoder its forward calls (the
  prompted forward moved out of clip/model.py in commit c130ece): the line
  self.image_encoder = ImageEncoder(clip_model.visual) is added;
- `from model.prompt_net import *` names a file the repository lacks: an empty module;
- torchvision's RandomHorizontalFlip(p=0.5) (flip_transform) becomes a
  deterministic flip (FLIP: always for step and round, never for step_lora) so
  the fixtures do not depend on torch's random stream;
- clip.tokenize / the description JSON files: synthetic descriptions of the
  classes class0..class4 written to a temporary attributes/pacs.json (dataset
  PACS_photo: prefix "a photo of a", no suffix), tokenised through a word table
  (the tiny CLIP's vocabulary has 1000 ids);
- data loaders: each client's train_loader is one batch of its images (as its
  full-batch DataLoader would give); sklearn, tensorboard, einops, PIL,
  matplotlib (imported, unused on this path) are empty stand-ins;
- server.py's aggregation loop is inlined (every client selected, the state
  dicts summed and divided by their number).

Usage: python3 reference/fedmvp/make_fixture.py  (make fixtures-fedmvp)
"""
import copy
import os
import sys
import tempfile
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "61"))
LR = float(os.environ.get("PFX_LR", "0.003"))  # the authors' OPTIM.LR
ROUND_LR = float(os.environ.get("PFX_ROUND_LR", "0.003"))
MOM, WD = 0.9, 1e-5  # the authors' OPTIM.MOMENTUM, OPTIM.WEIGHT_DECAY
ALPHA = 10  # the authors' --alpha
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "fedmvp"))
DATANAME = "PACS_photo"
FILES = ["model/FedMVP.py", "model/descriptors.py", "federated/client.py", "federated/base_trainer.py",
         "federated/utils.py"]
# word ids of the descriptions (synthetic where the real BPE id does not fit the tiny vocabulary)
WORDS = {"a": [320], "photo": [125], "of": [539], "which": [826], "has": [791], "is": [533], "stripes": [411],
         "dots": [412], "outline": [413], "round": [414], "square": [415]}
COLOURS = ["red", "blue", "green", "pink", "brown"]
COMMA = 267
FLIP = {"step": True, "step_lora": False, "round": True}
# β of the keys' LayerNorm shifts every key by the same vector and softmax
# ignores that: its gradient is 0, the reference's value float32 noise
# (~1e-10), so its gradient and updates are not stored (the verifier and the
# Go gradient test check it is ≈ 0).
ZERO_GRAD = "crossattn.cross_attend_blocks.0.norm_context.bias"


def stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def import_fedmvp(repo, dv, e):
    """Extracts and patches the authors' files; returns (FedMVP module, client module)."""
    root = tempfile.mkdtemp(prefix="fedmvp-ref-")
    C.extract(repo, FILES + ["clip/model.py"], root)
    path = os.path.join(root, "model", "FedMVP.py")
    src = open(path).read()
    edits = [
        # REPLACED: ViT-B/16's widths by the tiny CLIP's
        ("768", str(dv), 9),
        ("nn.Linear(512,", f"nn.Linear({e},", 1),
        # REPLACED: fp16 → float32
        ("        self.crossattn.half()\n", "", 1),
        ("        self.linear.half()\n", "", 1),
        # BUG FIXED: the image encoder the forward uses is never built
        ("        self.clip_model_zs = clip_model\n",
         "        self.clip_model_zs = clip_model\n        self.image_encoder = ImageEncoder(clip_model.visual)\n", 1),
    ]
    for old, new, count in edits:
        got = src.count(old)
        if got != count:
            raise SystemExit(f"model/FedMVP.py: expected {count} occurrence(s) of {old!r}, found {got}")
        src = src.replace(old, new)
    open(path, "w").write(src)
    # clip package: the repository's real model.py; tokenize replaced
    clip_pkg = stub("clip")
    clip_pkg.__path__ = [os.path.join(root, "clip")]
    model = C.load_module("clip.model", os.path.join(root, "clip", "model.py"))
    cl = stub("clip.clip", build_model=model.build_model, tokenize=C.TABLES.tokenize,
              _MODELS={"tiny": "replaced: the tiny CLIP of testdata/clip-tiny"})
    clip_pkg.clip = cl
    stub("clip.simple_tokenizer", SimpleTokenizer=lambda: types.SimpleNamespace(encode=C.TABLES.ids))
    # REPLACED: modules imported but unused on this path, and the missing prompt_net
    stub("model.prompt_net")
    stub("einops", repeat=None)
    stub("PIL", Image=None)
    stub("PIL.Image")
    stub("matplotlib")
    stub("matplotlib.pyplot")
    stub("torchvision")
    stub("torchvision.transforms", Compose=lambda ts: None, RandomHorizontalFlip=lambda p: None)
    sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]
    stub("sklearn")
    stub("sklearn.metrics", f1_score=None, confusion_matrix=None)
    stub("torch.utils.tensorboard", SummaryWriter=None)
    stub("dataloader")
    stub("dataloader.dm_federated", TrainDataManager=None)
    for pkg in ["model", "federated"]:
        p = stub(pkg)
        p.__path__ = [os.path.join(root, pkg)]
    sys.path.insert(0, root)
    C.load_module("model.descriptors", os.path.join(root, "model", "descriptors.py"))
    fm = C.load_module("model.FedMVP", os.path.join(root, "model", "FedMVP.py"))
    C.load_module("federated.utils", os.path.join(root, "federated", "utils.py"))
    C.load_module("federated.base_trainer", os.path.join(root, "federated", "base_trainer.py"))
    cm = C.load_module("federated.client", os.path.join(root, "federated", "client.py"))
    return fm, cm, root


def set_flip(fm, on):
    """REPLACED: RandomHorizontalFlip(p=0.5) by a deterministic flip."""
    fm.flip_transform = (lambda x: torch.flip(x, dims=[-1])) if on else (lambda x: x)


def write_descriptions(root, names):
    """Two synthetic descriptors per class in the authors' attributes JSON format."""
    import json
    table = {}
    for i, n in enumerate(names):
        C.TABLES.words[n + ","] = C.TABLES.words[n] + [COMMA]
        C.TABLES.words[COLOURS[i]] = [420 + i]
        table[n] = [f"{COLOURS[i]} stripes", "a round outline" if i % 2 == 0 else "a square outline"]
    os.makedirs(os.path.join(root, "attributes"), exist_ok=True)
    with open(os.path.join(root, "attributes", "pacs.json"), "w") as f:
        json.dump(table, f)


def make_client(cm, clip_model, names, lr, batch, cid=0):
    """A federated.client.Client without its data manager (REPLACED: the data
    loader is the one batch given)."""
    cfg = C.CN(MODEL=C.CN(N_CTX=4, NAME="fedmvp", BACKBONE=C.CN(NAME="tiny")), USE_CUDA=False,
               OPTIM=C.CN(NAME="sgd", LR=lr, WEIGHT_DECAY=WD, MOMENTUM=MOM, LR_SCHEDULER="cosine", STEPSIZE=(-1,),
                          GAMMA=0.1, MAX_EPOCH=10),
               TRAIN=C.CN(ALPHA=ALPHA))
    c = cm.Client.__new__(cm.Client)
    cm.TrainerBase.__init__(c)
    c.device, c.max_epoch, c.client_id, c.cfg = torch.device("cpu"), 10, cid, cfg
    c.train_loader = [{"img": batch[0], "label": batch[1], "cname": None}]
    c.available_classes, c.data_name = names, DATANAME
    c.build_model(clip_model)
    return c


def desc_inputs(fm, model, names):
    """The description rows the forward tokenises ([N, 77]) and their classes."""
    descs = fm.load_gpt_descriptions("attributes/pacs.json", names, DATANAME)
    rows, cls = [], []
    for i, n in enumerate(names):
        for d in descs[n]:
            rows.append(C.TABLES.tokenize(fm.truncate_text(d, 77)))
            cls.append(i)
    return torch.cat(rows), torch.tensor(cls), descs


def capture(fm, c, images, labels, names):
    """Every forward intermediate of FedMVP.forward (no grad)."""
    m = c.model
    got = {}
    pool = torch.nn.AdaptiveAvgPool1d.forward
    torch.nn.AdaptiveAvgPool1d.forward = lambda self, x: got.setdefault("vis_ctx", pool(self, x).permute(0, 2, 1)).permute(0, 2, 1)
    h1 = m.image_encoder.register_forward_hook(lambda mod, i, o: got.setdefault("image_raw", o))
    h2 = m.clip_model_zs.visual.register_forward_hook(lambda mod, i, o: got.setdefault("zs_raw", o))
    with torch.no_grad():
        logits, vis = m(images, names, DATANAME)
        enc = fm.compute_description_encodings(m.clip_model_zs, fm.load_gpt_descriptions("attributes/pacs.json", names, DATANAME), "cpu")
        text = torch.stack(list(enc.values()), 0).reshape(-1, enc[names[0]].shape[-1])
        ctx = m.prompt_learner.linear(text)
    torch.nn.AdaptiveAvgPool1d.forward = pool
    h1.remove()
    h2.remove()
    n = lambda x: x / x.norm(dim=-1, keepdim=True)  # noqa: E731
    return {"logits": logits, "vis_score": vis.reshape(1), "ce": torch.nn.functional.cross_entropy(logits, labels).reshape(1),
            "text_features": text, "textfeat_ctx": ctx, "vis_ctx": got["vis_ctx"],
            "image_features": n(got["image_raw"]), "zs_features": n(got["zs_raw"])}


def pl_state(c):
    return {"prompt_learner." + k: v.detach().clone() for k, v in c.model.prompt_learner.state_dict().items()}


def step(fm, c, images, labels, names):
    """One forward_backward and model_backward_and_update (their SGD)."""
    out = capture(fm, c, images, labels, names)
    c.set_model_mode("train")
    loss, _ = c.forward_backward({"img": images, "label": labels, "cname": None}, DATANAME, names)
    c.model_backward_and_update(loss)
    out["loss"] = loss.detach().reshape(1)
    for k, p in c.model.prompt_learner.named_parameters():
        # torch 1.x zero_grad keeps zero grads of frozen tensors
        if p.requires_grad and p.grad is not None and k != ZERO_GRAD:
            out["grad.prompt_learner." + k] = p.grad.detach().clone()
            out["step1.prompt_learner." + k] = p.detach().clone()
    return out


def main():
    repo = C.mirror("FEDMVP_REF", "/work/.mirror/mainaksingha01+FedMVP/repo")
    sd, _ = C.read_st(os.path.join(C.TESTDATA, "clip-tiny", "openai.safetensors"))
    dv, e = sd["visual.conv1.weight"].shape[0], sd["visual.proj"].shape[1]
    fm, cm, root = import_fedmvp(repo, dv, e)
    os.chdir(root)  # the forward opens attributes/<dataset>.json relative to the repository
    st, rnd = C.promptfl_inputs()
    names = C.register_classes(st["tokens"])
    C.TABLES.words.update(WORDS)
    write_descriptions(root, names)
    clip_model = C.load_clip_to_cpu()
    tokens = st["tokens"]
    desc_tokens, desc_class, descs = desc_inputs(fm, clip_model, names)
    images, labels = st["images"], st["labels"]
    meta = {"method": "fedmvp", "n_cls": len(names), "dataname": DATANAME, "alpha": ALPHA, "heads": 4, "prompts": 4,
            "lora_rank": 8, "lora_threshold": 0.5, "momentum": MOM, "weight_decay": WD, "seed": SEED, "prec": "fp32",
            "logit_scale": float(clip_model.logit_scale), "cos_eps": 1e-7, "descriptions": repr(descs)}

    torch.manual_seed(SEED)
    set_flip(fm, FLIP["step"])
    c = make_client(cm, clip_model, names, LR, (images, labels))
    init = pl_state(c)
    C.write_st(os.path.join(OUT, "init.safetensors"), init, {"method": "fedmvp", "seed": SEED})
    out = step(fm, c, images, labels, names)
    C.write_st(os.path.join(OUT, "step.safetensors"),
               {**out, "images": images, "labels": labels, "tokens": tokens, "desc_tokens": desc_tokens, "desc_class": desc_class},
               {**meta, "lr": LR, "flip_prob": 1, "lora": 0, "params": "init.safetensors"})

    # LoRA: a round of their train() with a threshold every loss is below
    # switches the client (their code: crossattn frozen, LoRA factors
    # trained, use_lora); its state is init_lora, then one step of a fresh
    # optimizer in LoRA mode
    set_flip(fm, FLIP["step_lora"])
    torch.manual_seed(SEED)
    c = make_client(cm, clip_model, names, LR, (images, labels))
    c.model.prompt_learner.load_state_dict({k[len("prompt_learner."):]: v for k, v in init.items()})
    c.train(0, early_stop_threshold=1e9)
    assert c.model.prompt_learner.use_lora
    init_lora = pl_state(c)
    C.write_st(os.path.join(OUT, "init_lora.safetensors"), init_lora, {"method": "fedmvp", "seed": SEED, "lora": 1})
    c.optim = cm.build_optimizer(c.model.prompt_learner, c.cfg.OPTIM)
    c._optims["prompt_learner"] = c.optim
    out = step(fm, c, images, labels, names)
    assert not any(k.startswith("grad.prompt_learner.crossattn.") for k in out), "LoRA mode trained the cross-attention"
    C.write_st(os.path.join(OUT, "step_lora.safetensors"),
               {**out, "images": images, "labels": labels, "tokens": tokens, "desc_tokens": desc_tokens, "desc_class": desc_class},
               {**meta, "lr": LR, "flip_prob": 0, "lora": 1, "params": "init_lora.safetensors"})

    # a round of two clients: each its train() (one batch: all its images),
    # then server.py's uniform mean of the prompt learners' state dicts
    set_flip(fm, FLIP["round"])
    res = {"tokens": tokens, "desc_tokens": desc_tokens, "desc_class": desc_class}
    w_glob, sizes = None, []
    for ci in range(2):
        ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
        torch.manual_seed(SEED)
        tc = make_client(cm, clip_model, names, ROUND_LR, (ims, lab), ci)
        tc.load_meta({k[len("prompt_learner."):]: v for k, v in init.items()})
        losses = []
        fb = tc.forward_backward
        tc.forward_backward = lambda *a: (lambda r: (losses.append(float(r[0])), r)[1])(fb(*a))
        w_local = tc.train(0)
        if tc.model.prompt_learner.use_lora:
            raise SystemExit(f"client {ci} switched to LoRA in the round (loss {losses}); the fixture keeps both clients before the switch")
        res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
        res[f"client{ci}.batch_losses"] = torch.tensor(losses)
        for k, v in w_local.items():
            if not k.startswith("cross_loraparams.") and k != ZERO_GRAD:  # LoRA: unchanged before the switch
                res[f"client{ci}.trained.prompt_learner.{k}"] = v.detach().clone()
        if w_glob is None:
            w_glob = copy.deepcopy(w_local)
        else:
            for k in w_glob.keys():
                w_glob[k] += w_local[k]
        sizes.append(len(lab))
    for k in w_glob.keys():
        w_glob[k] = torch.div(w_glob[k], 2)
        if not k.startswith("cross_loraparams.") and k != ZERO_GRAD:
            res["global.prompt_learner." + k] = w_glob[k]
    C.write_st(os.path.join(OUT, "round.safetensors"), res,
               {**meta, "lr": ROUND_LR, "flip_prob": 1, "batch_size": max(sizes), "local_epochs": 1, "client_sizes": str(sizes),
                "params": "init.safetensors", "aggregated": "prompt_learner.*", "aggregation": "uniform mean (server.py)", "local": "[]"})
    print("fedmvp fixtures written to", OUT)


if __name__ == "__main__":
    main()
