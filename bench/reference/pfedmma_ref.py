#!/usr/bin/env python3
"""Reference harness: the authors' pFedMMA training step and evaluation, timed.

Runs the model code of the authors' repository (github.com/sajjad-ucsb/pFedMMA:
trainers/pFedMMA.py's CustomCLIP over its clip/model.py) on CPU in float32 at the
setting of `pfedmma bench train`: ViT-B/16 shapes with random weights, adapters
on blocks 10-12 (r 32, scale 0.005), 24 classes, batch 32 of 224x224 images,
SGD lr 0.001 momentum 0.9 wd 5e-4 on the adapters only. It prints the JSON that
`pfedmma bench train --reference FILE.json` reads:

    {"train_images_per_s": ..., "eval_images_per_s": ..., "peak_rss_mib": ...}

Usage: /usr/bin/python3 pfedmma_ref.py --repo PATH_TO_THE_AUTHORS_CHECKOUT [--threads 2]

Nothing of the authors' code is copied here: it is imported from --repo. Its
trainer imports Dassl (a training framework) and clip/clip.py imports PIL,
torchvision, tqdm, ftfy and regex for downloading, preprocessing and
tokenising; none of them runs in a step, so the harness stubs those imports
(sys.modules) and builds the tokenised class prompts itself (SOT, 4 context
words, 2 class-name tokens, '.', EOT, as CLIP's tokenizer lays them out).
"""
import argparse
import importlib.util
import json
import resource
import statistics
import sys
import time
import types


def stub(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True, help="a checkout of the authors' pFedMMA repository")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--classes", type=int, default=24)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    # the authors' CLIP model code, with its adapter hooks (the package's
    # __init__ would import clip/clip.py, the downloader: not run)
    pkg = stub("clip", __path__=[f"{args.repo}/clip"])
    model_py = load("clip.model", f"{args.repo}/clip/model.py")

    def tokenize(texts, context_length=77):
        out = torch.zeros(len(texts), context_length, dtype=torch.long)
        for i, _ in enumerate(texts):
            ids = [49406, 320, 1125, 539, 320, 1000 + i, 2000 + i, 269, 49407]
            out[i, : len(ids)] = torch.tensor(ids)
        return out

    pkg.clip = types.SimpleNamespace(tokenize=tokenize, _MODELS={}, build_model=model_py.build_model)
    pkg.model = model_py
    for n in ["Dassl", "Dassl.dassl", "Dassl.dassl.engine"]:
        stub(n)
    stub("Dassl.dassl.engine.trainer", TrainerX=object)
    stub("Dassl.dassl.utils", load_pretrained_weights=None, load_checkpoint=None)
    stub("Dassl.dassl.optim", build_optimizer=None, build_lr_scheduler=None)
    trainer = load("pfedmma_trainer", f"{args.repo}/trainers/pFedMMA.py")

    clip_model = model_py.CLIP(512, 224, 12, 768, 16, 77, 49408, 512, 8, 12).float()

    mm = types.SimpleNamespace(TEXT_CTX_INIT="a photo of a", ADAPTER_START=10, ADAPTER_END=12,
                               ADAPTER_DIM=32, ADAPTER_SCALE=0.005, PREC="fp32")
    cfg = types.SimpleNamespace(INPUT=types.SimpleNamespace(SIZE=(224, 224)),
                                TRAINER=types.SimpleNamespace(MMADAPTER=mm))
    classnames = [f"class {i}" for i in range(args.classes)]
    model = trainer.CustomCLIP(cfg, classnames, clip_model)
    for name, p in model.named_parameters():
        p.requires_grad_("adapter" in name)
    trainable = [p for p in model.adapter_learner.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trainable, lr=0.001, momentum=0.9, weight_decay=5e-4)
    print(f"trainable parameters: {sum(p.numel() for p in trainable)}", file=sys.stderr)

    B = args.batch
    images = torch.randn(B, 3, 224, 224)
    labels = torch.arange(B) % args.classes

    def train_step():
        model.train()
        logits = model(images)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def eval_step():
        model.eval()
        model.text_features_for_inference = None  # text features once per evaluation, as the trainer does per test run
        with torch.no_grad():
            model(images)

    def rate(fn, name):
        for _ in range(2):
            fn()
        times = []
        for i in range(args.steps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            print(f"{name} {i + 1}/{args.steps}: {times[-1]:.2f} s", file=sys.stderr)
        return B / statistics.median(times)

    train = rate(train_step, "train")
    ev = rate(eval_step, "eval")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"train_images_per_s": round(train, 3), "eval_images_per_s": round(ev, 3),
                      "peak_rss_mib": round(rss, 1), "torch": torch.__version__, "threads": args.threads,
                      "batch": B, "classes": args.classes, "blocks": "10-12"}))


if __name__ == "__main__":
    main()
