"""Shared parts of the per-method reference harnesses (reference/*/*_ref.py).

Each harness imports one method's model code from the authors' checkout
(--repo), builds it over a random-weight ViT-B/16 CLIP at the setting of
`pfedmma bench train --method M` (batch 32, 224x224, 24 classes, the
method's defaults), and times the authors' training step and evaluation
batch on CPU in float32. This module holds what they share: the import
stubs for code a step never runs (Dassl, the downloader and the BPE
tokenizer), the thread settings and configuration line of pfedmma_ref.py,
the timing loop and the JSON that `pfedmma bench train --reference` reads.
Nothing of the authors' code is copied here.
"""
import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import resource
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pfedmma"))
import pfedmma_ref  # noqa: E402  (tokenize, configuration, thread settings)

tokenize = pfedmma_ref.tokenize
_json_out = sys.stdout
load = pfedmma_ref.load


class _Anything:
    """A stand-in for any name imported from a stubbed framework module:
    a class to subclass (TrainerX), a decorator (Registry.register()), a
    function never called in a step."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]  # used as a decorator
        return _Anything()

    def __getattr__(self, name):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves every module under the given top-level names to a stub
    whose every attribute is a stand-in."""

    def __init__(self, prefixes):
        self.prefixes = prefixes

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.prefixes:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def stub_module(name, **attrs):
    """sys.modules[name] = a module holding attrs."""
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def stub_packages(*names):
    """Every import of NAME or NAME.x.y (a training framework such as
    Dassl, a downloader's dependencies) gets a stub module."""
    sys.meta_path.insert(0, _StubFinder(set(names)))


class SimpleTokenizer:
    """clip.simple_tokenizer.SimpleTokenizer's contract for what trainers
    use at build time: encode(text) -> one id per word (name lengths only)."""

    def __init__(self, *a, **k):
        pass

    def encode(self, text):
        return [1000 + sum(map(ord, w)) % 40000 for w in text.split()]

    def decode(self, ids):
        return " ".join("w" for _ in ids)


def load_clip(repo, pkg="clip"):
    """Imports the authors' clip/model.py from repo as PKG.model, and makes
    `from PKG import clip` give a module with tokenize (the harness's, one
    row per string), and `PKG.simple_tokenizer` the stand-in tokenizer.
    Returns the model module."""
    p = types.ModuleType(pkg)
    p.__path__ = [f"{repo}/{pkg}"]
    sys.modules[pkg] = p
    model_py = load(f"{pkg}.model", f"{repo}/{pkg}/model.py")
    clip_mod = types.ModuleType(f"{pkg}.clip")
    clip_mod.tokenize = tokenize
    clip_mod._MODELS = {}
    clip_mod.build_model = model_py.build_model
    clip_mod.load = None
    clip_mod._tokenizer = SimpleTokenizer()
    sys.modules[f"{pkg}.clip"] = clip_mod
    tok = types.ModuleType(f"{pkg}.simple_tokenizer")
    tok.SimpleTokenizer = SimpleTokenizer
    sys.modules[f"{pkg}.simple_tokenizer"] = tok
    p.clip, p.model, p.simple_tokenizer = clip_mod, model_py, tok
    p.tokenize = tokenize
    return model_py


def vit_b16(model_py, image=224, *extra):
    """A random-weight ViT-B/16 CLIP in float32 and eval mode, as the
    trainers' build_model leaves it at PREC fp32 (clip_model.float()).
    extra: further positional arguments of the authors' CLIP (a repository
    whose model.py takes design_details)."""
    m = model_py.CLIP(512, image, 12, 768, 16, 77, 49408, 512, 8, 12, *extra)
    m.eval()
    m.float()
    return m


def cuda_is_cpu():
    """Makes Tensor.to('cuda...') and Module.to('cuda...') stay on the CPU:
    the stub for code that moves a tensor to the GPU inside a step (the
    harness times CPU only)."""
    import torch

    def cpu(args, kwargs):
        dev = kwargs.get("device", args[0] if args else None)
        if (isinstance(dev, str) and dev.startswith("cuda")) or (isinstance(dev, torch.device) and dev.type == "cuda"):
            if "device" in kwargs:
                kwargs = dict(kwargs, device="cpu")
            else:
                args = ("cpu",) + tuple(args[1:])
        return args, kwargs

    tensor_to, module_to = torch.Tensor.to, torch.nn.Module.to

    def t_to(self, *args, **kwargs):
        args, kwargs = cpu(args, kwargs)
        return tensor_to(self, *args, **kwargs)

    def m_to(self, *args, **kwargs):
        args, kwargs = cpu(args, kwargs)
        return module_to(self, *args, **kwargs)

    torch.Tensor.to, torch.nn.Module.to = t_to, m_to
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.cuda = lambda self, *a, **k: self


def torch2_attention():
    """On PyTorch < 2 (Debian's 1.13), adds what torch 2's
    torch.nn.functional provides and the authors' code calls: the public
    scaled_dot_product_attention (its math definition: softmax(q k^T /
    sqrt(d) + mask) v, dropout on the weights in training) and the private
    mask helpers _canonical_mask and _none_or_dtype (boolean masks become
    -inf additive masks). A torch >= 2 build keeps its own (fused) ones."""
    import math

    import torch
    import torch.nn.functional as F

    if hasattr(F, "scaled_dot_product_attention"):
        return False

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        L, S = q.size(-2), k.size(-2)
        w = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if is_causal:
            w = w.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                w = w.masked_fill(attn_mask.logical_not(), float("-inf"))
            else:
                w = w + attn_mask
        w = torch.softmax(w, dim=-1)
        if dropout_p > 0:
            w = F.dropout(w, p=dropout_p)
        return w @ v

    def canonical_mask(mask, mask_name, other_type, other_name, target_type, check_other=True):
        if mask is not None and mask.dtype == torch.bool:
            return torch.zeros_like(mask, dtype=target_type).masked_fill_(mask, float("-inf"))
        return mask

    F.scaled_dot_product_attention = sdpa
    F._canonical_mask = canonical_mask
    F._none_or_dtype = lambda x: None if x is None else x.dtype
    return True


def ns(**kw):
    """A nested config namespace from keyword arguments (dicts nest)."""
    return types.SimpleNamespace(**{k: ns(**v) if isinstance(v, dict) else v for k, v in kw.items()})


def parser(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--repo", required=True, help="a checkout of the authors' repository")
    ap.add_argument("--threads", type=int, default=2, help="PyTorch's OpenMP threads (torch.set_num_threads)")
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="OpenBLAS threads; 0 keeps OPENBLAS_NUM_THREADS or OpenBLAS's default")
    ap.add_argument("--spinning-threads", action="store_true",
                    help="keep OpenBLAS's and OpenMP's default spin-waiting idle threads")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--classes", type=int, default=24)
    ap.add_argument("--image", type=int, default=224,
                    help="image size (224 = the bench setting; smaller only for a smoke test)")
    return ap


def setup(args):
    """Thread settings as pfedmma_ref.py: re-exec with sleeping idle
    threads, torch.set_num_threads, optional OpenBLAS threads. Returns
    (torch, openblas library or None)."""
    if not args.spinning_threads:
        pfedmma_ref.sleep_idle_threads()
    global _json_out
    _json_out = sys.stdout  # the authors' code prints while building: to stderr
    sys.stdout = sys.stderr
    import torch

    torch.set_num_threads(args.threads)
    ob = pfedmma_ref.openblas()
    if args.blas_threads > 0:
        if ob is None:
            raise SystemExit("--blas-threads: OpenBLAS not found")
        ob.openblas_set_num_threads(args.blas_threads)
    torch.manual_seed(0)
    return torch, ob


def check_prompts(name, tokenized, rows):
    """Refuses to run unless the model holds the expected tokenised prompt
    rows (the issue-26 lesson: one row per prompt string)."""
    if tuple(tokenized.shape) != (rows, 77):
        raise SystemExit(f"{name}: {tuple(tokenized.shape)} tokenised prompts, want ({rows}, 77)")


def run(args, torch, ob, method, train_step, eval_step, trainable, extra=None, before_eval=None):
    """Times train_step and eval_step (warm-up, then --steps timed calls,
    median) and prints the --reference JSON on stdout."""
    print(f"{method}: trainable parameters: {sum(p.numel() for p in trainable)}", file=sys.stderr)
    config, detail = pfedmma_ref.configuration(torch, ob)
    print(f"configuration: {detail}", file=sys.stderr)
    B = args.batch

    def rate(fn, name):
        for _ in range(args.warmup):
            fn()
        times = []
        for i in range(args.steps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            print(f"{method} {name} {i + 1}/{args.steps}: {times[-1]:.2f} s", file=sys.stderr)
        return B / statistics.median(times)

    train = rate(train_step, "train")
    if before_eval is not None:
        before_eval()
    ev = rate(eval_step, "eval")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {"method": method, "train_images_per_s": round(train, 3), "eval_images_per_s": round(ev, 3),
           "peak_rss_mib": round(rss, 1), "torch": torch.__version__, "threads": args.threads,
           "batch": B, "classes": args.classes, "image": args.image, "steps": args.steps}
    out.update(extra or {})
    out.update({"config": config, "config_detail": detail})
    print(json.dumps(out), file=_json_out, flush=True)
