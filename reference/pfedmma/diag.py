#!/usr/bin/env python3
"""Diagnosis of the reference harness (issue 26): where a training step and an
evaluation batch of the authors' pFedMMA spend their time.

Builds the model exactly as pfedmma_ref.py does (the authors' CustomCLIP,
imported from --repo) and prints, per step, wall time, user and system CPU
time, the process's thread count, and per-module wall-clock shares measured
with forward hooks: patch-embedding conv, vision attention, vision MLP,
vision adapters, the whole text encoder, the loss, backward, the optimizer.
It also lists what the model holds: the number of tokenised prompts (the
text encoder's batch), the dtype of every weight, the parameters that
require gradients, how often the text encoder runs per step.

--chars-as-prompts reproduces the bug of the harness before issue 26: its
clip.tokenize stub treated a string as a list and returned one row per
character, so each class prompt "a photo of a class 7." became ~21 prompts
(518 for 24 classes) and the text encoder ran ~21x the authors' work.

    /usr/bin/python3 reference/pfedmma/diag.py --repo /tmp/pfedmma-ref --mode train
    /usr/bin/python3 reference/pfedmma/diag.py --repo /tmp/pfedmma-ref --chars-as-prompts
    /usr/bin/python3 reference/pfedmma/diag.py --repo ... --image 112 --batch 8   # quick
"""
import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pfedmma_ref as R  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads; 0 keeps PyTorch's default")
    ap.add_argument("--blas-threads", type=int, default=0, help="openblas_set_num_threads; 0 keeps the default")
    ap.add_argument("--mode", choices=["train", "eval", "both"], default="both")
    ap.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--classes", type=int, default=24)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--chars-as-prompts", action="store_true",
                    help="the old harness's tokenize stub: one prompt per character of each class prompt")
    ap.add_argument("--eval-text-each-batch", action="store_true",
                    help="the old harness's evaluation: text features recomputed for every batch")
    ap.add_argument("--no-timers", action="store_true", help="no forward hooks")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    ob = R.openblas()
    if args.blas_threads > 0:
        ob.openblas_set_num_threads(args.blas_threads)
    torch.manual_seed(0)
    model_py, trainer = R.load_authors(args.repo)
    if args.chars_as_prompts:
        def chars(texts, context_length=77):  # the old stub: a str gave len(str) rows
            out = torch.zeros(len(texts), context_length, dtype=torch.long)
            for i, _ in enumerate(texts):
                ids = [49406, 320, 1125, 539, 320, 1000 + i, 2000 + i, 269, 49407]
                out[i, : len(ids)] = torch.tensor(ids)
            return out
        sys.modules["clip"].clip.tokenize = chars
    model, opt = R.build(model_py, trainer, classes=args.classes, image=args.image, check=not args.chars_as_prompts)

    print("configuration:", R.configuration(torch, ob)[1])
    print("OMP_NUM_THREADS=%s OPENBLAS_NUM_THREADS=%s OPENBLAS_CORETYPE=%s" % tuple(
        os.environ.get(k, "-") for k in ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE"]))
    print("tokenised prompts (text-encoder batch):", tuple(model.tokenized_prompts.shape))
    dtypes = collections.Counter(str(p.dtype) for p in model.parameters())
    dtypes.update(f"buffer {b.dtype}" for b in model.buffers())
    print("weight dtypes:", dict(dtypes))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    print(f"requires grad: {len(trainable)} tensors, {sum(p.numel() for p in model.parameters() if p.requires_grad)} values,"
          f" all adapters: {all('adapter' in n for n in trainable)}; optimizer holds {len(opt.param_groups[0]['params'])}")

    timers = collections.defaultdict(float)
    calls = collections.Counter()
    if not args.no_timers:
        def hook(name, m):
            def pre(_m, _inp):
                m._t0 = time.perf_counter()

            def post(_m, _inp, _out):
                timers[name] += time.perf_counter() - m._t0
                calls[name] += 1
            m.register_forward_pre_hook(pre)
            m.register_forward_hook(post)
        v = model.image_encoder
        hook("vision patch conv", v.conv1)
        for blk in v.transformer.resblocks:
            hook("vision attention", blk.attn)
            hook("vision MLP", blk.mlp)
        hook("vision encoder (all)", v)
        hook("text encoder (all)", model.text_encoder)

    B = args.batch
    images = torch.randn(B, 3, args.image, args.image)
    labels = torch.arange(B) % args.classes

    def train_step():
        model.adapter_learner.train()
        t0 = time.perf_counter()
        out = model(images)
        loss = F.cross_entropy(out, labels)
        t1 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        loss.item()
        t3 = time.perf_counter()
        timers["forward (all)"] += t1 - t0
        timers["backward"] += t2 - t1
        timers["optimizer"] += t3 - t2

    def eval_step():
        model.adapter_learner.eval()
        if args.eval_text_each_batch:
            model.text_features_for_inference = None
        t0 = time.perf_counter()
        with torch.no_grad():
            model(images)
        timers["forward (all)"] += time.perf_counter() - t0

    def run(name, fn):
        fn()  # warm-up
        timers.clear()
        calls.clear()
        walls, users, syss = [], [], []
        for _ in range(args.steps):
            c0, t0 = os.times(), time.perf_counter()
            fn()
            c1, t1 = os.times(), time.perf_counter()
            walls.append(t1 - t0)
            users.append(c1.user - c0.user)
            syss.append(c1.system - c0.system)
        n = args.steps
        wall = sum(walls) / n
        print(f"\n{name}: {wall:.2f} s/step wall ({B / wall:.2f} images/s), CPU user {sum(users) / n:.2f} s,"
              f" system {sum(syss) / n:.2f} s per step; threads {len(os.listdir('/proc/self/task'))};"
              f" load {os.getloadavg()[0]:.2f}")
        for k, t in sorted(timers.items(), key=lambda kv: -kv[1]):
            print(f"  {k:24s} {t / n:7.2f} s  {100 * t / sum(walls):5.1f}%  ({calls[k] // n if calls[k] else '-'} calls)")
        return {"wall": wall, "user": sum(users) / n, "sys": sum(syss) / n,
                "timers": {k: t / n for k, t in timers.items()}}

    res = {}
    if args.mode in ("train", "both"):
        res["train"] = run("train step", train_step)
    if args.mode in ("eval", "both"):
        model.text_features_for_inference = None
        res["eval"] = run("eval batch", eval_step)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
