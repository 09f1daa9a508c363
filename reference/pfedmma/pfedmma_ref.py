#!/usr/bin/env python3
"""Reference harness: the authors' pFedMMA training step and evaluation, timed.

Runs the model code of the authors' repository (github.com/sajjad-ucsb/pFedMMA:
trainers/pFedMMA.py's CustomCLIP over its clip/model.py) on CPU in float32 at the
setting of `pfedmma bench train`: ViT-B/16 shapes with random weights, adapters
on blocks 10-12 (r 32, scale 0.005), 24 classes, batch 32 of 224x224 images,
SGD lr 0.001 momentum 0.9 wd 5e-4 on the adapters only. It prints the JSON that
`pfedmma bench train --reference FILE.json` reads:

    {"train_images_per_s": ..., "eval_images_per_s": ..., "peak_rss_mib": ...,
     "config": "torch 1.13.1+dfsg-4 Debian (no MKL), OpenBLAS 0.3.21 Cooperlake, ..."}

Usage: /usr/bin/python3 pfedmma_ref.py --repo PATH_TO_THE_AUTHORS_CHECKOUT
           [--threads 2] [--blas-threads 2]

A training step is the trainer's forward_backward at PREC fp32: the model's
forward with the adapter learner in training mode (both encoders run, the text
features are recomputed), cross-entropy, zero_grad, backward, SGD step. An
evaluation batch is the trainer's test(): adapter learner in eval mode, no_grad
forward with the class text features computed once (CustomCLIP caches them in
text_features_for_inference on the first test batch) and then reused.

Nothing of the authors' code is copied here: it is imported from --repo. Its
trainer imports Dassl (a training framework) and clip/clip.py imports PIL,
torchvision, tqdm, ftfy and regex for downloading, preprocessing and
tokenising; none of them runs in a step, so the harness stubs those imports
(sys.modules) and provides clip.tokenize itself: like CLIP's, it takes a
string or a list of strings and returns one row of 77 token ids per string
(SOT, the words, EOT; the ids do not change the cost, every row runs the full
77-token context). The built model is checked to hold one text prompt per class.

Threads: torch.set_num_threads(--threads) sizes PyTorch's OpenMP pool (its
element-wise ops, layer norms, softmax, oneDNN convolution); PyTorch from
Debian calls OpenBLAS (the libblas.so.3 alternative) for every matrix product,
and OpenBLAS keeps its own pthread pool, sized by OPENBLAS_NUM_THREADS or
--blas-threads (openblas_set_num_threads). Both default to 2 here. Idle
threads of both pools sleep instead of spinning (OPENBLAS_THREAD_TIMEOUT=4,
OMP_WAIT_POLICY=PASSIVE, as pfedmma sets for itself; --spinning-threads keeps
the libraries' defaults): see reference/pfedmma/README.md for the measurements.
"""
import argparse
import ctypes
import ctypes.util
import importlib.util
import json
import os
import re
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


def tokenize(texts, context_length=77):
    """CLIP's clip.tokenize contract: a string or a list of strings in, one
    row of context_length token ids per string out (SOT, one id per word, EOT).
    The ids are placeholders; the text encoder's cost does not depend on them."""
    import torch

    if isinstance(texts, str):
        texts = [texts]
    out = torch.zeros(len(texts), context_length, dtype=torch.long)
    for i, text in enumerate(texts):
        words = text.split()
        ids = [49406] + [1000 + sum(map(ord, w)) % 40000 for w in words] + [49407]
        out[i, : len(ids)] = torch.tensor(ids[:context_length])
    return out


def load_authors(repo):
    """Imports the authors' clip/model.py and trainers/pFedMMA.py from a
    checkout, with stubs for what a step never runs; returns both modules."""
    pkg = stub("clip", __path__=[f"{repo}/clip"])
    model_py = load("clip.model", f"{repo}/clip/model.py")
    pkg.clip = types.SimpleNamespace(tokenize=tokenize, _MODELS={}, build_model=model_py.build_model)
    pkg.model = model_py
    for n in ["Dassl", "Dassl.dassl", "Dassl.dassl.engine"]:
        stub(n)
    stub("Dassl.dassl.engine.trainer", TrainerX=object)
    stub("Dassl.dassl.utils", load_pretrained_weights=None, load_checkpoint=None)
    stub("Dassl.dassl.optim", build_optimizer=None, build_lr_scheduler=None)
    trainer = load("pfedmma_trainer", f"{repo}/trainers/pFedMMA.py")
    return model_py, trainer


def build(model_py, trainer, classes=24, start=10, dim=32, scale=0.005, image=224, check=True):
    """The trainer's build_model at PREC fp32 over a random-weight ViT-B/16
    CLIP (a smaller image shrinks it for diagnosis): returns the
    CustomCLIP and the SGD optimizer over its adapter learner. check: fail
    unless the model holds one tokenised prompt per class."""
    import torch

    clip_model = model_py.CLIP(512, image, 12, 768, 16, 77, 49408, 512, 8, 12)
    clip_model.eval()  # build_model returns model.eval()
    clip_model.float()  # PREC fp32 (or amp): clip_model.float()
    mm = types.SimpleNamespace(TEXT_CTX_INIT="a photo of a", ADAPTER_START=start, ADAPTER_END=12,
                               ADAPTER_DIM=dim, ADAPTER_SCALE=scale, PREC="fp32")
    cfg = types.SimpleNamespace(INPUT=types.SimpleNamespace(SIZE=(image, image)),
                                TRAINER=types.SimpleNamespace(MMADAPTER=mm))
    model = trainer.CustomCLIP(cfg, [f"class_{i}" for i in range(classes)], clip_model)
    if check and tuple(model.tokenized_prompts.shape) != (classes, 77):
        raise SystemExit(f"pfedmma_ref: {tuple(model.tokenized_prompts.shape)} tokenised prompts, want ({classes}, 77)")
    for name, p in model.named_parameters():  # the trainer's rule
        if "text_adapter" not in name and "visual_adapter" not in name and "shared_adapter" not in name:
            p.requires_grad_(False)
    # build_optimizer(self.model.adapter_learner, cfg.OPTIM): SGD, no nesterov, no dampening
    opt = torch.optim.SGD(model.adapter_learner.parameters(), lr=0.001, momentum=0.9, weight_decay=5e-4)
    return model, opt


def openblas():
    """The OpenBLAS library PyTorch's BLAS calls land in (already loaded
    through libblas.so.3), or None."""
    for name in ["libopenblas.so.0", ctypes.util.find_library("openblas")]:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return lib
        except (OSError, AttributeError):
            pass
    return None


def blas_target():
    """Where the libblas.so.3 alternative points."""
    for p in ["/usr/lib/x86_64-linux-gnu/libblas.so.3", "/usr/lib/aarch64-linux-gnu/libblas.so.3"]:
        if os.path.exists(p):
            return os.path.realpath(p)
    return "?"


def configuration(torch, ob):
    """The PyTorch build, its BLAS and the thread pools: a short line (printed
    beside every ratio) and a long one (for the record)."""
    found = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    blas_info = found.group(1) if found else "?"
    mkl = "MKL" if torch.backends.mkl.is_available() else "no MKL"
    build, origin = torch.__version__, "pip"
    if torch.__file__.startswith("/usr/lib/python3/dist-packages"):
        import subprocess

        try:
            build = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "python3-torch"],
                                   capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            pass
        origin = "Debian"
    if ob is not None:
        cfg = ob.openblas_get_config().decode().split()
        blas = f"OpenBLAS {cfg[1] if len(cfg) > 1 else '?'} {ob.openblas_get_corename().decode()}"
        blas_threads = ob.openblas_get_num_threads()
    else:
        blas, blas_threads = "BLAS " + blas_target(), "?"
    omp = torch.get_num_threads()
    sleeping = all(os.environ.get(k, "").lower() == v.lower() for k, v in IDLE_THREADS_SLEEP.items())
    short = (f"torch {build} {origin} ({mkl}), {blas}, {blas_threads} BLAS + {omp} OpenMP threads"
             + (", idle threads sleep" if sleeping else ""))
    env = environment()
    long = (f"torch {build} ({origin}, BLAS_INFO={blas_info}, {mkl}), {blas} kernels via {blas_target()}, "
            f"{blas_threads} OpenBLAS threads, {omp} OpenMP threads" + (f"; {env}" if env else ""))
    return short, long


# Idle OpenBLAS and OpenMP threads sleep instead of spinning (sched_yield loops
# for 2^28 cycles in OpenBLAS, spin-waits in libgomp), as pfedmma's own binary
# sets for itself; both are read when the libraries load, hence the re-exec.
IDLE_THREADS_SLEEP = {"OPENBLAS_THREAD_TIMEOUT": "4", "OMP_WAIT_POLICY": "PASSIVE"}


def sleep_idle_threads():
    """Re-executes this script with IDLE_THREADS_SLEEP in the environment,
    leaving any value the user set; returns when nothing is missing."""
    missing = {k: v for k, v in IDLE_THREADS_SLEEP.items() if k not in os.environ}
    if missing and "PFEDMMA_REF_EXEC" not in os.environ:
        env = dict(os.environ, PFEDMMA_REF_EXEC="1", **missing)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def environment():
    """The thread and kernel settings in the environment, for the record."""
    keys = ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_THREAD_TIMEOUT", "OMP_WAIT_POLICY"]
    return " ".join(f"{k}={os.environ[k]}" for k in keys if k in os.environ)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True, help="a checkout of the authors' pFedMMA repository")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's OpenMP threads (torch.set_num_threads)")
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="OpenBLAS threads (openblas_set_num_threads); 0 keeps OPENBLAS_NUM_THREADS or OpenBLAS's default")
    ap.add_argument("--spinning-threads", action="store_true",
                    help="keep OpenBLAS's and OpenMP's default spin-waiting idle threads (slower here)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--classes", type=int, default=24)
    args = ap.parse_args()
    if not args.spinning_threads:
        sleep_idle_threads()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    ob = openblas()
    if args.blas_threads > 0:
        if ob is None:
            raise SystemExit("pfedmma_ref: --blas-threads: OpenBLAS not found")
        ob.openblas_set_num_threads(args.blas_threads)
    torch.manual_seed(0)

    model_py, trainer = load_authors(args.repo)
    model, opt = build(model_py, trainer, classes=args.classes)
    trainable = [p for p in model.parameters() if p.requires_grad]
    print(f"trainable parameters: {sum(p.numel() for p in trainable)}", file=sys.stderr)
    config, detail = configuration(torch, ob)
    print(f"configuration: {detail}", file=sys.stderr)

    B = args.batch
    images = torch.randn(B, 3, 224, 224)
    labels = torch.arange(B) % args.classes

    def train_step():  # forward_backward at PREC fp32
        model.adapter_learner.train()  # set_model_mode("train")
        output = model(images)
        loss = F.cross_entropy(output, labels)
        opt.zero_grad()  # model_backward_and_update
        loss.backward()
        opt.step()
        loss.item()

    def eval_step():  # one batch of test()
        model.adapter_learner.eval()  # set_model_mode("eval")
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
    # a test run starts with fresh text features: the first batch computes them, the rest reuse them
    model.text_features_for_inference = None
    ev = rate(eval_step, "eval")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"train_images_per_s": round(train, 3), "eval_images_per_s": round(ev, 3),
                      "peak_rss_mib": round(rss, 1), "torch": torch.__version__, "threads": args.threads,
                      "batch": B, "classes": args.classes, "blocks": "10-12", "config": config, "config_detail": detail}))


if __name__ == "__main__":
    main()
