#!/usr/bin/env python3
"""Reference harness: the authors' CoCoOp training step and evaluation, timed.

Imports trainers/cocoop.py (PromptLearner with its meta-net, TextEncoder,
CustomCLIP) and clip/model.py from a checkout of github.com/KaiyangZhou/CoOp
(--repo) and times, on CPU in float32, at the setting of `pfedmma bench
train --method cocoop`: ViT-B/16 shapes with random weights, 24 classes,
batch 32 of 224x224 images, the method's defaults (4 context tokens
initialised from "a photo of a", the meta-net 512 -> 32 -> 512), SGD lr
0.001 momentum 0.9 wd 5e-4 on the prompt learner (the trainer's rule).

A training step is CoCoOp.forward_backward at PREC fp32: the frozen image
encoder, the meta-net's image-conditioned context, then for each image of
the batch the 24 prompts through the text encoder (32 x 24 prompts per
step), cross-entropy inside the model, zero_grad, backward, SGD step. An
evaluation batch is the same forward under no_grad in eval mode (logits).
pfedmma's cocoop draws its context at random when it has no tokenizer (the
bench has none); the cost is the same.

Usage: /usr/bin/python3 cocoop_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method cocoop --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)

    rc.stub_packages("dassl", "Dassl")
    model_py = rc.load_clip(args.repo)
    trainer = rc.load("cocoop_trainer", f"{args.repo}/trainers/cocoop.py")
    clip_model = rc.vit_b16(model_py, args.image)
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)},
                TRAINER={"COCOOP": {"N_CTX": 4, "CTX_INIT": "a photo of a", "PREC": "fp32"}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    rc.check_prompts("cocoop_ref", model.tokenized_prompts, args.classes)
    for name, p in model.named_parameters():  # the trainer's rule
        if "prompt_learner" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward, PREC fp32
        model.train()
        loss = model(images, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "cocoop", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 4})


if __name__ == "__main__":
    main()
