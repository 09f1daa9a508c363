#!/usr/bin/env python3
"""Reference harness: the authors' PromptFL training step and evaluation, timed.

Imports trainers/promptfl.py (PromptLearner, TextEncoder, CustomCLIP) and
clip/model.py from a checkout of github.com/sajjad-ucsb/pFedMMA (--repo)
and times, on CPU in float32, at the setting of `pfedmma bench train
--method promptfl`: ViT-B/16 shapes with random weights, 24 classes, batch
32 of 224x224 images, the method's defaults (16 generic context tokens,
random init std 0.02, class token at the end), SGD lr 0.001 momentum 0.9
wd 5e-4 on the prompt learner only (the trainer's rule).

A training step is PromptFL.forward_backward at PREC fp32 (no FedProx):
the model's forward (the whole frozen image encoder, the 24 prompts through
the text encoder), cross-entropy, zero_grad, backward (through the text
encoder down to the context vectors), SGD step. An evaluation batch is a
no_grad forward in eval mode: CustomCLIP recomputes the text features in
every forward, so each batch runs both encoders.

Usage: /usr/bin/python3 promptfl_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method promptfl --reference FILE` reads.
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
    trainer = rc.load("promptfl_trainer", f"{args.repo}/trainers/promptfl.py")
    clip_model = rc.vit_b16(model_py, args.image)
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)},
                TRAINER={"PROMPTFL": {"N_CTX": 16, "CTX_INIT": "", "CSC": False,
                                      "CLASS_TOKEN_POSITION": "end", "PREC": "fp32"}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    rc.check_prompts("promptfl_ref", model.tokenized_prompts, args.classes)
    for name, p in model.named_parameters():  # the trainer's rule
        if "prompt_learner" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward, PREC fp32
        model.train()
        output = model(images)
        loss = F.cross_entropy(output, labels)
        opt.zero_grad()  # model_backward_and_update
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "promptfl", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 16})


if __name__ == "__main__":
    main()
