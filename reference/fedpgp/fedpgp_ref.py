#!/usr/bin/env python3
"""Reference harness: the authors' FedPGP training step and evaluation, timed.

Imports trainers/fedpgp.py (PromptLearner, TextEncoder, CustomCLIP) and
clip/model.py from a checkout of github.com/sajjad-ucsb/pFedMMA (--repo)
and times, on CPU in float32, at the setting of `pfedmma bench train
--method fedpgp`: ViT-B/16 shapes with random weights, 24 classes, batch
32 of 224x224 images, the method's defaults (16 context tokens, bottleneck
8, N 1 prompt, mu 0.5, temperature 0.5, init std 0.02, class token at the
end), SGD lr 0.001 momentum 0.9 wd 5e-4 on the prompt learner (U, V, sigma).

A training step is FedPGP.forward_backward at PREC fp32: the forward in
training mode (the frozen image encoder, then the text encoder four times
over the 24 prompts: the full prompt, the frozen embedding, sigma and UV),
the contrastive loss (cosine positives/negatives over temperature) times mu
plus cross-entropy, zero_grad, backward, SGD step. An evaluation batch is a
no_grad forward in eval mode (the image encoder and one text-encoder pass
over the 24 prompts; CustomCLIP recomputes the text features every batch).

Usage: /usr/bin/python3 fedpgp_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method fedpgp --reference FILE` reads.
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
    trainer = rc.load("fedpgp_trainer", f"{args.repo}/trainers/fedpgp.py")
    clip_model = rc.vit_b16(model_py, args.image)
    mu, temp = 0.5, 0.5
    cfg = rc.ns(INPUT={"SIZE": (args.image, args.image)},
                TRAINER={"FEDPGP": {"N_CTX": 16, "CTX_INIT": "", "CSC": False, "BOTTLENECK": 8, "N": 1,
                                    "mu": mu, "temp": temp, "CLASS_TOKEN_POSITION": "end", "PREC": "fp32"}})
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(args.classes)], clip_model)
    rc.check_prompts("fedpgp_ref", model.tokenized_prompts, args.classes)
    for name, p in model.named_parameters():  # the trainer's rule
        if "prompt_learner" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes
    cos = torch.nn.CosineSimilarity(dim=-1)

    def train_step():  # forward_backward, PREC fp32
        model.train()
        f0, fsigma, _, f, output = model(images)
        posi = cos(f0, fsigma)
        nega = cos(fsigma, f)
        logits = torch.cat((posi.reshape(-1, 1), nega.reshape(-1, 1)), dim=1) / temp
        target = torch.zeros(logits.size(0)).long()
        loss = F.cross_entropy(output, labels) + mu * F.cross_entropy(logits, target)
        opt.zero_grad()  # model_backward_and_update
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "fedpgp", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 16, "bottleneck": 8})


if __name__ == "__main__":
    main()
