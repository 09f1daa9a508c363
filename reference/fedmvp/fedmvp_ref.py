#!/usr/bin/env python3
"""Reference harness: the authors' FedMVP training step and evaluation, timed.

Imports model/FedMVP.py (FedMVP, ImageEncoder, PromptLearner, CrossAttention,
PreNorm, FeedForward, GEGLU, CrossLoRAparams, compute_description_encodings),
model/descriptors.py (load_gpt_descriptions), clip/model.py and the client,
federated/client.py (Client.build_model, forward_backward, with
TrainerBase's model_backward_and_update) and federated/utils.py
(build_optimizer, build_lr_scheduler) from a checkout of
github.com/mainaksingha01/FedMVP (--repo). Times, on CPU in float32, at the
setting of `pfedmma bench train --method fedmvp`: ViT-B/16 shapes with random
weights (the 768/512 widths FedMVP.py hard-codes are ViT-B/16's), 24
classes with 4 attribute descriptors each (pfedmma's generated count; the
authors' LLM-written lists have about ten), batch 32 of 224x224 images,
alpha 10 (their --alpha), their optimizer settings (SGD lr 0.003 momentum
0.9 wd 1e-5) on the prompt learner (cross-attention and the linear map; the
LoRA factors stay frozen until the loss falls below 0.5, which a random
model does not reach).

A training step is the authors' Client.forward_backward then
model_backward_and_update, as their Client.train runs them for a one-batch
loader: the forward (the description JSON read twice and the 96
descriptions encoded twice by the frozen text encoder; the linear map of
the description features, broadcast over the batch; the image encoder with
the cross-attention of the 196 patches over the 96 description keys, its
4 pooled visual context tokens appended before block 1; the frozen
zero-shot image encoder over the randomly flipped images; the description
logits and the consistency score), CE + alpha x score, zero_grad, the
finite-loss check, backward (through all 12 vision blocks to the
cross-attention), SGD step. An evaluation batch is their model_inference
(the same forward) under no_grad.

What is not theirs, and why (the fixture generator
reference/fedmvp/make_fixture.py makes the same changes):
- FedMVP.__init__ never builds the self.image_encoder its forward calls
  (the prompted forward moved out of clip/model.py upstream): the harness
  sets model.image_encoder = their ImageEncoder(clip_model.visual);
- `from model.prompt_net import *` names a file the repository lacks: an
  empty module;
- their crossattn.half() / linear.half() (GPU fp16) are undone with
  .float() after build_model: float32 like the rest;
- torchvision (not installed for Debian's python3) is a stand-in:
  transforms.Compose and RandomHorizontalFlip(p) on a tensor flip the last
  axis when torch.rand(1) < p, as torchvision's tensor path does;
- the attribute JSON: attributes/caltech101.json written to a temporary
  working directory (the forward reads it by relative path), 4 descriptors
  per class; clip.tokenize is the harness's (one row per description);
- the client is made without its constructor (no data manager);
  sklearn, tensorboard, einops, PIL, matplotlib and PMFLT-style dataloader
  imports (unused on this path) are stubs; .cuda()/.to('cuda') stay on the CPU.

Note: `pfedmma bench train --method fedmvp` needs CLIP's tokenizer for the
descriptions: give it `--vocab` (CLIP's bpe_simple_vocab_16e6.txt.gz;
sitting_all.sh passes $CLIP_VOCAB).

Usage: /usr/bin/python3 fedmvp_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method fedmvp --reference FILE` reads.
"""
import json
import os
import sys
import tempfile
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402

DESCRIPTORS = ["a round outline", "has a striped surface", "red colour", "often seen alone"]


def stubs(torch, repo):
    """Stand-ins for what FedMVP's modules import and this path never runs
    (and the missing model/prompt_net.py); torchvision's flip as its tensor path."""
    def flip(p):
        return lambda x: torch.flip(x, dims=[-1]) if torch.rand(1) < p else x

    def compose(ts):
        def run(x):
            for t in ts:
                x = t(x)
            return x
        return run

    tv = rc.stub_module("torchvision")
    tv.transforms = rc.stub_module("torchvision.transforms", Compose=compose, RandomHorizontalFlip=flip)
    rc.stub_module("einops", repeat=None)
    rc.stub_module("PIL", Image=None)
    rc.stub_module("PIL.Image")
    rc.stub_module("matplotlib")
    rc.stub_module("matplotlib.pyplot")
    rc.stub_module("sklearn")
    rc.stub_module("sklearn.metrics", f1_score=None, confusion_matrix=None)
    rc.stub_module("torch.utils.tensorboard", SummaryWriter=None)
    rc.stub_module("dataloader")
    rc.stub_module("dataloader.dm_federated", TrainDataManager=None)
    for pkg in ["model", "federated"]:
        m = rc.stub_module(pkg)
        m.__path__ = [f"{repo}/{pkg}"]
    rc.stub_module("model.prompt_net")


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    args.repo = os.path.abspath(args.repo)
    torch, ob = rc.setup(args)

    rc.cuda_is_cpu()
    stubs(torch, args.repo)
    model_py = rc.load_clip(args.repo)
    rc.load("model.descriptors", f"{args.repo}/model/descriptors.py")
    fm = rc.load("model.FedMVP", f"{args.repo}/model/FedMVP.py")
    rc.load("federated.utils", f"{args.repo}/federated/utils.py")
    rc.load("federated.base_trainer", f"{args.repo}/federated/base_trainer.py")
    cm = rc.load("federated.client", f"{args.repo}/federated/client.py")

    dataname = "Caltech101"  # prefix "a photo of a", no suffix
    classnames = [f"object {i}" for i in range(args.classes)]
    work = tempfile.mkdtemp(prefix="fedmvp-ref-")
    os.makedirs(f"{work}/attributes")
    with open(f"{work}/attributes/caltech101.json", "w") as f:
        json.dump({c: DESCRIPTORS for c in classnames}, f)
    os.chdir(work)  # the forward reads attributes/<dataset>.json by relative path

    clip_model = rc.vit_b16(model_py, args.image)
    alpha = 10.0
    cfg = rc.ns(MODEL={"N_CTX": 4, "NAME": "fedmvp", "BACKBONE": {"NAME": "ViT-B/16"}}, USE_CUDA=False,
                OPTIM={"NAME": "sgd", "LR": 0.003, "WEIGHT_DECAY": 1e-5, "MOMENTUM": 0.9, "LR_SCHEDULER": "cosine",
                       "STEPSIZE": (-1,), "GAMMA": 0.1, "MAX_EPOCH": 10},
                TRAIN={"ALPHA": alpha})
    client = cm.Client.__new__(cm.Client)
    cm.TrainerBase.__init__(client)
    client.device, client.max_epoch, client.client_id, client.cfg = torch.device("cpu"), 10, 0, cfg
    client.available_classes, client.data_name = classnames, dataname
    client.build_model(clip_model)
    model = client.model
    model.prompt_learner.float()  # their .half() is for their GPU
    model.image_encoder = fm.ImageEncoder(clip_model.visual)  # never built by their __init__
    descs = fm.load_gpt_descriptions("attributes/caltech101.json", classnames, dataname)
    rows = torch.cat([rc.tokenize([fm.truncate_text(d, 77) for d in descs[c]]) for c in classnames])
    rc.check_prompts("fedmvp_ref", rows, len(DESCRIPTORS) * args.classes)

    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes
    batch = {"img": images, "label": labels, "cname": None}

    def train_step():  # Client.train with a one-batch loader
        client.set_model_mode("train")
        loss, _ = client.forward_backward(batch, dataname, classnames)
        if loss.item() < 0.5:
            raise SystemExit("fedmvp_ref: the loss fell below their LoRA switch (0.5); the timed step would change")
        client.model_backward_and_update(loss)

    def eval_step():
        client.set_model_mode("eval")
        with torch.no_grad():
            client.model_inference(images, classnames, dataname)

    rc.run(args, torch, ob, "fedmvp", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad],
           {"descriptors_per_class": len(DESCRIPTORS), "alpha": alpha, "dataset": dataname})


if __name__ == "__main__":
    main()
