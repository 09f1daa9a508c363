#!/usr/bin/env python3
"""Reference harness: the authors' pFedMoAP training step and evaluation, timed.

Imports trainers/pfedmoap.py (PromptLearner, CustomCLIP with its attention
gate MultiheadAttention) and trainers/promptfl.py (TextEncoder) and
clip/model.py from a checkout of github.com/ljaiverson/pFedMoAP (--repo) and
times, on CPU in float32, at the setting of `pfedmma bench train --method
pfedmoap`: ViT-B/16 shapes with random weights, 24 classes, batch 32 of
224x224 images, the method's defaults (16 context tokens, init std 0.02,
class token at the end, gate 128 wide with 8 heads, scaling 10, lambda 0.5;
SGD lr 0.002 on the prompt learner and lr 0.01 on the gate, momentum 0.9,
wd 5e-4), with --nonlocal (default 1) downloaded expert contexts: the bench
runs two clients, so client 0's pool holds one other client's prompt.

Before timing, the harness downloads the nonlocal contexts as the trainer's
download_nonlocal_ctx does (their text features are computed once per round,
outside the step). A training step is PFEDMOAP.forward_backward at PREC
fp32: the frozen image encoder, the local prompts through the text encoder,
the gate over the local and nonlocal pooled text features, lambda times the
local logits plus the gated logits, cross-entropy, zero_grad of both
optimizers, backward, both SGD steps (Dassl's model_backward_and_update over
the two registered models). An evaluation batch is the same forward under
no_grad in eval mode (the local text features are recomputed every batch).

Usage: /usr/bin/python3 pfedmoap_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method pfedmoap --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def main():
    ap = rc.parser(__doc__.splitlines()[0])
    ap.add_argument("--nonlocal", type=int, default=1, dest="nonlocal_",
                    help="downloaded expert contexts (num_experts - 1 at most; the bench's two clients give 1)")
    args = ap.parse_args()
    torch, ob = rc.setup(args)
    import torch.nn.functional as F

    rc.stub_packages("Dassl")
    model_py = rc.load_clip(args.repo)
    sys.path.insert(0, args.repo)  # pfedmoap.py imports trainers.promptfl
    trainer = rc.load("trainers.pfedmoap", f"{args.repo}/trainers/pfedmoap.py")
    # load_clip_to_cpu's design_details (trainers/promptfl.py)
    clip_model = rc.vit_b16(model_py, args.image, {"trainer": "PromptFL", "vision_depth": 0, "language_depth": 0,
                                                  "vision_ctx": 0, "language_ctx": 0})
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)},
                TRAINER={"PFEDMOAP": {"N_CTX": 16, "CTX_INIT": "", "CSC": False, "CLASS_TOKEN_POSITION": "end",
                                      "PREC": "fp32", "LMBDA": 0.5, "GATING_HEADS": 8, "GATING_EMBED_DIM": 128,
                                      "SCALING": 10, "NUM_EXPERTS": 10}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    rc.check_prompts("pfedmoap_ref", model.tokenized_prompts, args.classes)
    for name, p in model.named_parameters():  # the trainer's rule
        if "prompt_learner" not in name and "gating" not in name:
            p.requires_grad_(False)
    optim_p = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.002, momentum=0.9, weight_decay=5e-4)
    optim_g = torch.optim.SGD(model.gating.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    # download_nonlocal_ctx: other clients' contexts, their text features computed once
    ctx = model.prompt_learner.ctx.detach()
    model.nonlocal_ctx = [ctx + 0.01 * torch.randn_like(ctx) for _ in range(args.nonlocal_)]
    model._compute_nonlocal_text_features()
    if len(model.nonlocal_text_features or []) != args.nonlocal_:
        raise SystemExit(f"pfedmoap_ref: {len(model.nonlocal_text_features or [])} nonlocal experts, want {args.nonlocal_}")
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward, PREC fp32
        model.train()
        output = model(images)
        loss = F.cross_entropy(output, labels)
        optim_p.zero_grad()  # model_backward_and_update over both registered models
        optim_g.zero_grad()
        loss.backward()
        optim_p.step()
        optim_g.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "pfedmoap", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 16, "nonlocal_experts": args.nonlocal_})


if __name__ == "__main__":
    main()
