#!/usr/bin/env python3
"""Reference harness: the authors' CLIP-Adapter training step and evaluation, timed.

Imports clip_adapter.py (Adapter, TextEncoder, CustomCLIP) from a checkout
of github.com/gaopengcuhk/CLIP-Adapter (--repo). That repository has no
clip package of its own (it runs inside CoOp's tree), so OpenAI's
clip/model.py is imported from --clip-repo (default: the pFedMMA checkout
beside it, whose clip/model.py is OpenAI's). Times, on CPU in float32, at
the setting of `pfedmma bench train --method clip_adapter`: ViT-B/16 shapes
with random weights, 24 classes, batch 32 of 224x224 images, ratio 0.2 and
reduction 4, SGD lr 0.001 momentum 0.9 wd 5e-4 on the adapter only.

The authors' CustomCLIP builds Adapter(1024, 4), the width of RN50's
features; at ViT-B/16 (512-wide features) the harness replaces it by the
authors' Adapter(512, 4) (their class, the width of the backbone). Their
TextEncoder moves the tokens to 'cuda' in every forward: .to('cuda') stays
on the CPU here (refcommon.cuda_is_cpu).

A training step is CLIP_Adapter.forward_backward: the forward (the frozen
image encoder, the adapter and its 0.2 residual mix, and the text encoder
over the 24 class prompts — the authors re-tokenise and re-encode them in
every forward), cross-entropy, zero_grad, backward (the adapter only), SGD
step. An evaluation batch is the same forward under no_grad in eval mode.

Usage: /usr/bin/python3 clipadapter_ref.py --repo CHECKOUT --clip-repo PFEDMMA_CHECKOUT [--steps 10]
Prints the JSON that `pfedmma bench train --method clip_adapter --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def main():
    ap = rc.parser(__doc__.splitlines()[0])
    ap.add_argument("--clip-repo", required=True,
                    help="a checkout holding OpenAI's clip/model.py (github.com/sajjad-ucsb/pFedMMA)")
    args = ap.parse_args()
    torch, ob = rc.setup(args)
    import torch.nn.functional as F

    rc.cuda_is_cpu()
    rc.stub_packages("dassl", "Dassl")
    model_py = rc.load_clip(args.clip_repo)
    trainer = rc.load("clipadapter_trainer", f"{args.repo}/clip_adapter.py")
    clip_model = rc.vit_b16(model_py, args.image)
    cfg = rc.ns(DATASET={"NAME": "Caltech101"})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    model.adapter = trainer.Adapter(clip_model.text_projection.shape[1], 4).to(clip_model.dtype)
    rows = torch.cat([rc.tokenize(trainer.CUSTOM_TEMPLATES["Caltech101"].format(f"class {i}"))
                      for i in range(args.classes)])
    rc.check_prompts("clipadapter_ref", rows, args.classes)
    for name, p in model.named_parameters():  # the trainer's rule
        if "adapter" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.adapter.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward
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

    rc.run(args, torch, ob, "clip_adapter", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"ratio": 0.2, "reduction": 4})


if __name__ == "__main__":
    main()
