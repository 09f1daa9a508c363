#!/usr/bin/env python3
"""Reference harness: the authors' FedOTP training step and evaluation, timed.

Imports trainers/GLP_OT.py (PromptLearner, TextEncoder, CustomCLIP with its
Sinkhorn / entropic COT solvers) and clip/model.py (whose image encoder
returns every token's features) from a checkout of
github.com/HongxiaLee/FedOTP (--repo) and times, on CPU in float32, at the
setting of `pfedmma bench train --method fedotp`: ViT-B/16 shapes with
random weights, 24 classes, batch 32 of 224x224 images, the method's
defaults (N 2 prompts of 16 context tokens, init std 0.02, class token at
the end, OT COT with top_percent 0.8, max_iter 100, thresh 1e-3), except
eps: 0.1 (the authors' default; --eps), because at pfedmma's 0.01 the
random-weight similarities underflow the authors' float32 kernel
exp(-(1 - sim)/eps) and their forward returns None (NaN plan),
SGD lr 0.001 momentum 0.9 wd 5e-4 on the prompt learner (the trainer's rule).

A training step is GLP_OT.forward_backward at PREC fp32: the forward (the
frozen image encoder's 197 token features, the 2x24 prompts through the
text encoder, the no_grad COT transport plan over the 196 patch tokens and
2 prompts, the transported similarity as logits), cross-entropy, zero_grad,
backward, SGD step. An evaluation batch is the same forward under no_grad
in eval mode (the text features are recomputed every batch).

Usage: /usr/bin/python3 fedotp_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method fedotp --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def main():
    ap = rc.parser(__doc__.splitlines()[0])
    ap.add_argument("--eps", type=float, default=0.1,
                    help="the transport's entropic eps (EPS; 0.1 is the authors' --eps default; pfedmma's 0.01 "
                         "underflows exp(-(1-sim)/eps) in float32 at random weights and the authors' forward returns None)")
    args = ap.parse_args()
    torch, ob = rc.setup(args)
    import torch.nn.functional as F

    rc.stub_packages("Dassl")
    model_py = rc.load_clip(args.repo)
    trainer = rc.load("fedotp_trainer", f"{args.repo}/trainers/GLP_OT.py")
    # load_clip_to_cpu's design_details
    clip_model = rc.vit_b16(model_py, args.image, {"trainer": "GLP_OT", "vision_depth": 0, "language_depth": 0,
                                                  "vision_ctx": 0, "language_ctx": 0})
    N = 2
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)}, DATASET={"NAME": "bench"},
                TRAINER={"GLP_OT": {"N_CTX": 16, "CTX_INIT": "", "CSC": False, "N": N,
                                    "CLASS_TOKEN_POSITION": "end", "PREC": "fp32", "OT": "COT",
                                    "EPS": args.eps, "THRESH": 1e-3, "TOP_PERCENT": 0.8, "MAX_ITER": 100}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    rc.check_prompts("fedotp_ref", model.tokenized_prompts, N * args.classes)
    for name, p in model.named_parameters():  # the trainer's rule
        if "prompt_learner" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward, PREC fp32
        model.train()
        output = model(images)
        if output is None:
            raise SystemExit("fedotp_ref: the transport plan has NaNs (the authors' forward returned None)")
        loss = F.cross_entropy(output, labels)
        opt.zero_grad()  # model_backward_and_update
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "fedotp", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 16, "prompts": N, "ot": "COT", "eps": args.eps})


if __name__ == "__main__":
    main()
