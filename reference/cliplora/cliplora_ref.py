#!/usr/bin/env python3
"""Reference harness: the authors' CLIP-LoRA training step and evaluation, timed.

Imports loralib (apply_lora, PlainMultiheadAttentionLoRA,
mark_only_lora_as_trainable, get_lora_parameters) and clip/model.py from a
checkout of github.com/MaxZanella/CLIP-LoRA (--repo) and times, on CPU in
float32, at the setting of `pfedmma bench train --method clip_lora`:
ViT-B/16 shapes with random weights, 24 classes, batch 32 of 224x224
images, the method's (and the authors') defaults: LoRA on q, k, v of every
block of both encoders (encoder both, position all), r 2, alpha 1, dropout
0.25; the authors' optimizer, AdamW lr 2e-4 wd 1e-2 betas (0.9, 0.999) with
their cosine schedule stepped every iteration; logit scale 100 (main.py).

A training step is one iteration of lora.py's run_lora loop (the loop body
is inline there, so the harness runs the same statements): the 24 class
prompts through the LoRA text encoder, the batch through the LoRA image
encoder, both with gradients, the normalised cosine logits times 100,
cross-entropy, zero_grad, backward through all 12 blocks of both encoders,
AdamW step, scheduler step. The authors run it under CUDA fp16 autocast with
a GradScaler; here it is float32 on the CPU (autocast and the scaler are
left out: the scaler is the identity without fp16). loralib's attention
calls torch 2's F.scaled_dot_product_attention and mask helpers; on Debian's
PyTorch 1.13 the harness adds them (refcommon.torch2_attention, the math
definition) and records "attention" in the JSON. An evaluation batch is
one batch of evaluate_lora: the text features are computed once per
evaluation (before the loop), so a batch is the image encoder and the logits.

Usage: /usr/bin/python3 cliplora_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method clip_lora --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)
    import torch.nn.functional as F

    polyfill = rc.torch2_attention()
    model_py = rc.load_clip(args.repo)
    sys.path.insert(0, args.repo)
    import loralib.utils as lora_utils

    clip_model = rc.vit_b16(model_py, args.image)
    largs = rc.ns(encoder="both", position="all", backbone="ViT-B/16", params=["q", "k", "v"],
                  r=2, alpha=1, dropout_rate=0.25)
    layers = lora_utils.apply_lora(largs, clip_model)
    if len(layers) != 24:
        raise SystemExit(f"cliplora_ref: {len(layers)} LoRA attention layers, want 24 (12 per encoder)")
    lora_utils.mark_only_lora_as_trainable(clip_model)
    params = lora_utils.get_lora_parameters(clip_model)
    opt = torch.optim.AdamW(params, weight_decay=1e-2, betas=(0.9, 0.999), lr=2e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 500, eta_min=1e-6)
    logit_scale = 100
    texts = [f"a photo of a class {i}." for i in range(args.classes)]  # dataset.template[0]
    tokens = rc.tokenize(texts)
    rc.check_prompts("cliplora_ref", tokens, args.classes)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes

    def train_step():  # one iteration of run_lora's loop, encoder both
        clip_model.train()
        class_embeddings = clip_model.encode_text(tokens)
        text_features = class_embeddings / class_embeddings.norm(dim=-1, keepdim=True)
        image_features = clip_model.encode_image(images)
        image_features = image_features / image_features.norm(dim=-1, keepdim=True)
        cosine_similarity = logit_scale * image_features @ text_features.t()
        loss = F.cross_entropy(cosine_similarity, labels)
        loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()

    state = {}

    def before_eval():  # evaluate_lora: text features once per evaluation
        clip_model.eval()
        with torch.no_grad():
            e = clip_model.encode_text(tokens)
            state["text"] = e / e.norm(dim=-1, keepdim=True)

    def eval_step():
        with torch.no_grad():
            f = clip_model.encode_image(images)
            f = f / f.norm(dim=-1, keepdim=True)
            f @ state["text"].t()

    rc.run(args, torch, ob, "clip_lora", train_step, eval_step, [p for p in clip_model.parameters() if p.requires_grad],
           {"r": 2, "alpha": 1, "dropout": 0.25, "optimizer": "AdamW",
            "attention": "torch-2 math polyfill" if polyfill else "torch's own"}, before_eval=before_eval)


if __name__ == "__main__":
    main()
