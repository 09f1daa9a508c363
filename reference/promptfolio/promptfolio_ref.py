#!/usr/bin/env python3
"""Reference harness: the authors' PromptFolio training step and evaluation, timed.

Imports trainers/PromptFolio.py (PromptLearner, TextEncoder, CustomCLIP) and
clip/model.py from a checkout of github.com/PanBikang/PromptFolio (--repo)
and times, on CPU in float32, at the setting of `pfedmma bench train
--method promptfolio`: ViT-B/16 shapes with random weights, 24 classes,
batch 32 of 224x224 images, the method's defaults with the bench's 16
context tokens (N 2 prompts: global and local, generic context, init std
0.02, class token at the end, frac theta 0.4), SGD lr 0.001 momentum 0.9
wd 5e-4 on the prompt learner (the trainer's rule).

A training step is PromptFolio.forward_backward at PREC fp32: the forward
(the frozen image encoder, the global and the local 24 prompts through the
text encoder, mixed 0.6/0.4), then — as the authors' code does — the image
features once more (get_img_features, unused by the loss), cross-entropy,
zero_grad, backward, SGD step. An evaluation batch is a no_grad forward in
eval mode (both text passes are recomputed every batch).

Usage: /usr/bin/python3 promptfolio_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method promptfolio --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)
    import torch.nn.functional as F

    rc.stub_packages("Dassl")
    model_py = rc.load_clip(args.repo)
    trainer = rc.load("promptfolio_trainer", f"{args.repo}/trainers/PromptFolio.py")
    # load_clip_to_cpu's design_details
    clip_model = rc.vit_b16(model_py, args.image, {"trainer": "PromptFL", "vision_depth": 0, "language_depth": 0,
                                                  "vision_ctx": 0, "language_ctx": 0})
    N, frac = 2, 0.4
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)}, DATASET={"NAME": "bench"},
                TRAINER={"PLOT": {"N_CTX": 16, "CTX_INIT": "", "N": N, "CLASS_TOKEN_POSITION": "end", "PREC": "fp32"},
                         "PROMPTFL": {"CSC": False, "FRAC": frac}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    rc.check_prompts("promptfolio_ref", model.tokenized_prompts, N * args.classes)
    for name, p in model.named_parameters():  # the trainer's rule
        if "prompt_learner" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward, PREC fp32
        model.train()
        output = model(images)
        model.get_img_features(images)  # the authors' img_feature, unused
        loss = F.cross_entropy(output, labels)
        opt.zero_grad()  # model_backward_and_update
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "promptfolio", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 16, "prompts": N, "frac": frac})


if __name__ == "__main__":
    main()
