#!/usr/bin/env python3
"""Reference harness: the authors' FedTPG training step and evaluation, timed.

Imports model/FedTPG.py (FedTPG, PromptLearner over model/prompt_net.py's
PromptTranslator, ImageEncoder, TextEncoder) and clip/model.py from a
checkout of github.com/boschresearch/FedTPG (--repo) and times, on CPU in
float32, at the setting of `pfedmma bench train --method fedtpg`: ViT-B/16
shapes with random weights, 24 classes, batch 32 of 224x224 images, the
method's defaults (N_CTX 4 generated context tokens, D_CTX 1, DEPTH 0: the
translator is its cross-attention only, 4 heads), SGD lr 0.001 momentum 0.9
wd 5e-4 on the prompt learner (the client's rule).

A training step is the client's forward_backward + model_backward_and_update:
FedTPG.forward tokenises the 24 class names and encodes them with the frozen
text encoder (no_grad, the translator's keys), the translator generates the
context, the 24 prompts run through the text encoder, the frozen image
encoder runs the batch, cross-entropy (+ w x score, score 0), zero_grad,
backward (through the text encoder to the translator), SGD step. An
evaluation batch is the same forward under no_grad in eval mode.

Changed: the authors' PromptLearner casts its translator to fp16
(meta_net.half(), for their GPU); here it is float32 like the rest. Their
forward moves the tokens to 'cuda': that stays on the CPU
(refcommon.cuda_is_cpu). FedTPG is built with device 'cpu'. Without einops
installed, einops.repeat is a stand-in for the one pattern used.

Usage: /usr/bin/python3 fedtpg_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method fedtpg --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def einops_stub(torch):
    """When einops is not installed (Debian's python3 here has none), a
    stand-in einops.repeat for the one pattern prompt_net.py uses,
    'n d -> b n d' (the soft prompt broadcast over the batch: einops's own
    expand). Any other pattern fails loudly."""
    try:
        import einops  # noqa: F401
        return
    except ImportError:
        pass

    def repeat(t, pattern, **sizes):
        if pattern.split() != ["n", "d", "->", "b", "n", "d"]:
            raise SystemExit(f"fedtpg_ref: einops stand-in: pattern {pattern!r} not supported; install einops")
        return t.unsqueeze(0).expand(sizes["b"], -1, -1)

    rc.stub_module("einops", repeat=repeat)


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)
    import torch.nn.functional as F

    rc.cuda_is_cpu()
    einops_stub(torch)
    model_py = rc.load_clip(args.repo)
    sys.path.insert(0, args.repo)  # FedTPG.py imports model.prompt_net
    fedtpg = rc.load("model.FedTPG", f"{args.repo}/model/FedTPG.py")
    clip_model = rc.vit_b16(model_py, args.image)
    cfg = rc.ns(MODEL={"N_CTX": 4, "D_CTX": 1, "DEPTH": 0, "NAME": "fedtpg"}, TRAIN={"W": 0.0})
    model = fedtpg.FedTPG(cfg, clip_model, device="cpu")
    model.prompt_learner.float()  # the authors' meta_net.half() is for their GPU
    classnames = [f"class_{i}" for i in range(args.classes)]
    _, rows = model.get_tokenized_classnames([c.replace("_", " ") for c in classnames])
    rc.check_prompts("fedtpg_ref", rows, args.classes)
    for name, p in model.named_parameters():  # the client's rule
        if "prompt_learner" not in name:
            p.requires_grad_(False)
    opt = torch.optim.SGD(model.prompt_learner.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # forward_backward + model_backward_and_update
        model.train()
        output, score = model(images, classnames, "bench")
        loss = F.cross_entropy(output, labels) + cfg.TRAIN.W * score
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images, classnames, "bench")[0]

    rc.run(args, torch, ob, "fedtpg", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad], {"n_ctx": 4, "d_ctx": 1, "depth": 0})


if __name__ == "__main__":
    main()
