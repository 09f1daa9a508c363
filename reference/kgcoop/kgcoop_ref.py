#!/usr/bin/env python3
"""Reference harness: the authors' KgCoOp training step and evaluation, timed.

Imports KgCoOp/trainers/kgcoop.py (PromptLearner, TextEncoder, CustomCLIP)
and KgCoOp/clip/model.py from a checkout of github.com/htyao89/KgCoOp
(--repo: the repository root or its KgCoOp/ folder) and times, on CPU in
float32, at the setting of `pfedmma bench train --method kgcoop`: ViT-B/16
shapes with random weights, 24 classes, batch 32 of 224x224 images, the
method's defaults (the authors' vit_b16_ep100_ctxv1 and base2new_train.sh:
4 context tokens initialised from "a photo of a", class-shared, λ = W = 8),
SGD lr 0.002 momentum 0.9 wd 5e-4 (Dassl's SGD defaults) on the prompt
learner, where only the context requires gradients (the trainer's rule:
every parameter whose name lacks "ctx" is frozen).

A training step is KgCoOp.forward_backward at PREC fp32: the model's
forward (the whole frozen image encoder, the 24 prompts through the text
encoder, the cosine pull towards the frozen "a photo of a {}." features),
cross-entropy + W x score, zero_grad, backward (through the text encoder
down to the context), SGD step. An evaluation batch is model_inference
under no_grad in eval mode: CustomCLIP recomputes the text features in
every forward, so each batch runs both encoders.

The frozen hand-crafted text features (ori_embedding) come from a second
CLIP that the authors' PromptLearner loads with load_clip_to_cpu (the
downloaded checkpoint); the harness hands it a second random-weight
ViT-B/16 instead, and computes those features once at construction, as the
authors do. The dataset name, which only picks the hand-crafted template,
is Caltech101 ("a photo of a {}.").

Usage: /usr/bin/python3 kgcoop_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method kgcoop --reference FILE` reads.
"""
import os

import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)
    import torch.nn.functional as F

    repo = args.repo
    if not os.path.exists(f"{repo}/trainers/kgcoop.py") and os.path.exists(f"{repo}/KgCoOp/trainers/kgcoop.py"):
        repo = f"{repo}/KgCoOp"  # the repository root holds the code in KgCoOp/
    if not os.path.exists(f"{repo}/trainers/kgcoop.py"):
        raise SystemExit(f"kgcoop_ref: --repo {args.repo}: no trainers/kgcoop.py or KgCoOp/trainers/kgcoop.py")
    rc.stub_packages("dassl", "Dassl")
    rc.cuda_is_cpu()  # the PromptLearner moves its frozen CLIP and prompts .cuda()
    model_py = rc.load_clip(repo)
    trainer = rc.load("kgcoop_trainer", f"{repo}/trainers/kgcoop.py")
    # the frozen CLIP of the hand-crafted prompts: a second random ViT-B/16
    trainer.load_clip_to_cpu = lambda cfg: rc.vit_b16(model_py, args.image)
    clip_model = rc.vit_b16(model_py, args.image)
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)},
                DATASET={"NAME": "Caltech101"},
                MODEL={"BACKBONE": {"NAME": "ViT-B/16"}},
                TRAINER={"COOP": {"N_CTX": 4, "CTX_INIT": True, "CSC": False, "CLASS_TOKEN_POSITION": "end",
                                  "PREC": "fp32", "W": 8.0},
                         "COCOOP": {"PREC": "fp32"}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    rc.check_prompts("kgcoop_ref", model.tokenized_prompts, args.classes)
    if tuple(model.ori_embedding.shape) != (args.classes, 512):
        raise SystemExit(f"kgcoop_ref: hand-crafted text features {tuple(model.ori_embedding.shape)}, want ({args.classes}, 512)")
    for name, p in model.named_parameters():  # the trainer's rule
        if "ctx" not in name:
            p.requires_grad_(False)
    w = cfg.TRAINER.COOP.W
    opt = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.002, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward, PREC fp32
        model.train()
        output, score = model(images)
        loss = F.cross_entropy(output, labels) + w * score
        opt.zero_grad()  # model_backward_and_update
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():  # model_inference
        model.eval()
        with torch.no_grad():
            model(images)[0]

    rc.run(args, torch, ob, "kgcoop", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 4, "w": w})


if __name__ == "__main__":
    main()
