#!/usr/bin/env python3
"""Reference harness: the authors' MaPLe training step and evaluation, timed.

Imports trainers/maple.py (MultiModalPromptLearner, TextEncoder,
CustomCLIP) and clip/model.py (its MaPLe blocks, which swap the deep
prompts in) from a checkout of github.com/muzairkhattak/multimodal-prompt-learning
(--repo) and times, on CPU in float32, at the setting of `pfedmma bench
train --method maple`: ViT-B/16 shapes with random weights, 24 classes,
batch 32 of 224x224 images, the method's defaults (the authors'
vit_b16_c2_ep5_batch4_2ctx: 2 context tokens initialised from "a photo of
a", prompt depth 9, i.e. the shallow prompts plus 8 deeper text prompts
each projected 512 -> 768 into the image encoder), SGD lr 0.0035 momentum
0.9 wd 5e-4 over the model (Dassl's build_optimizer), where only the
prompt learner requires gradients (the trainer's rule).

A training step is MaPLe.forward_backward at PREC fp32: the model's
forward (the prompt learner, the 24 prompts through the text encoder with
the deep prompts swapped in at blocks 2-9, the image encoder with the
projected prompts appended, blocks 2-9 swapping them), the cross-entropy
inside the model, zero_grad, backward (through both encoders down to
block 1), SGD step. An evaluation batch is the same forward under no_grad
in eval mode (logits): both encoders every batch.

Precision: the authors' config runs PREC fp16 on a GPU. At fp32 their code
mixes dtypes: the prompt learner's proj is made half (proj.half()) and the
forward casts the visual and deep prompts to half before concatenating
them to the float32 tokens. The harness times float32 as every harness
does: it casts the built model to float32 (proj included); the in-forward
.half() casts stay (they round the 2 prompt tokens per block to fp16, then
torch.cat promotes them back to float32: negligible cost).

Usage: /usr/bin/python3 maple_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method maple --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402

N_CTX, DEPTH = 2, 9


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)

    rc.stub_packages("dassl", "Dassl")
    model_py = rc.load_clip(args.repo)
    trainer = rc.load("maple_trainer", f"{args.repo}/trainers/maple.py")
    design = {"trainer": "MaPLe", "vision_depth": 0, "language_depth": 0, "vision_ctx": 0,
              "language_ctx": 0, "maple_length": N_CTX}  # load_clip_to_cpu's design_details
    clip_model = rc.vit_b16(model_py, args.image, design)
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)},
                TRAINER={"MAPLE": {"N_CTX": N_CTX, "CTX_INIT": "a photo of a", "PREC": "fp32",
                                   "PROMPT_DEPTH": DEPTH}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    model.float()  # the prompt learner's proj.half(): float32 throughout (see the docstring)
    rc.check_prompts("maple_ref", model.tokenized_prompts, args.classes)
    if len(model.prompt_learner.compound_prompts_text) != DEPTH - 1:
        raise SystemExit(f"maple_ref: {len(model.prompt_learner.compound_prompts_text)} deep prompts, want {DEPTH - 1}")
    for name, p in model.named_parameters():  # the trainer's rule
        if "prompt_learner" not in name and "VPT" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.0035, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward, PREC fp32
        model.train()
        loss = model(images, labels)
        opt.zero_grad()  # model_backward_and_update
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "maple", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": N_CTX, "prompt_depth": DEPTH})


if __name__ == "__main__":
    main()
