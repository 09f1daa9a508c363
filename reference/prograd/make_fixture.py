"""ProGrad reference fixtures on the tiny CLIP, made by running the authors' code.

Runs BeierZhu/Prompt-align (ProGrad.public/trainers/prograd.py: PromptLearner, TextEncoder,
CustomCLIP, the zero-shot CLIP class, ProGradLoss, the ProGrad trainer's build_model and non-amp
forward_backward; ProGrad.public/clip/model.py; and from their Dassl fork
Dassl.ProGrad.pytorch/dassl/engine/trainer.py: TrainerBase with prograd_backward_and_update, the
projection, plus its optim/ and metrics/) in float32 on CPU. What cannot run here is replaced, each
replacement marked REPLACED below and listed in reference/prograd/README.md.

Usage: /usr/bin/python3 make_fixture.py [--out testdata/prograd]   (PROGRAD_REF: the git mirror)
"""
import argparse
import os
import sys
import tempfile
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

N_CTX = 4
LR, ROUND_LR, MOM, WD = 0.002, 0.01, 0.9, 5e-4
T, LAMBDA = 1.0, 1.0     # the authors' LOSS.T and LOSS.LAMBDA (scripts: LAMBDA=1.0)
SEED = 37
T2, LAMBDA2 = 2.0, 0.5   # step_t2 only
PRE_STEPS, PRE_LR = 25, 0.05
DATASET = "ImageNet"     # CUSTOM_TEMPLATES["ImageNet"] = "a photo of a {}."
WORDS = {"a": [320], "photo": [125], "of": [539]}
FORK = "Dassl.ProGrad.pytorch/"
PUB = "ProGrad.public/"


def install_dassl_fork(repo):
    """Their Dassl fork (its TrainerBase holds prograd_backward_and_update), installed as
    common.install_dassl installs KaiyangZhou's: optim/, metrics/ and TrainerBase verbatim;
    REPLACED: SimpleTrainer's data loaders, evaluator and writer (TrainerX takes cfg and classes)."""
    root = tempfile.mkdtemp(prefix="dassl-prograd-")
    files = ["dassl/optim/optimizer.py", "dassl/optim/lr_scheduler.py", "dassl/optim/radam.py",
             "dassl/metrics/accuracy.py", "dassl/engine/trainer.py"]
    for f in files:
        out = os.path.join(root, f)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            fh.write(C.git_show(repo, FORK + f))
    pkg = types.ModuleType("dassl")
    pkg.__path__ = [os.path.join(root, "dassl")]
    sys.modules["dassl"] = pkg
    opt = types.ModuleType("dassl.optim")
    opt.__path__ = [os.path.join(root, "dassl", "optim")]
    sys.modules["dassl.optim"] = opt
    o = C.load_module("dassl.optim.optimizer", os.path.join(root, "dassl/optim/optimizer.py"))
    s = C.load_module("dassl.optim.lr_scheduler", os.path.join(root, "dassl/optim/lr_scheduler.py"))
    opt.build_optimizer, opt.build_lr_scheduler = o.build_optimizer, s.build_lr_scheduler
    met = types.ModuleType("dassl.metrics")
    met.compute_accuracy = C.load_module("dassl.metrics.accuracy", os.path.join(root, "dassl/metrics/accuracy.py")).compute_accuracy
    sys.modules["dassl.metrics"] = met
    ut = types.ModuleType("dassl.utils")

    def tolist_if_not(x):
        return x if isinstance(x, list) else [x]

    ut.tolist_if_not = tolist_if_not
    ut.load_pretrained_weights = lambda *a, **k: None
    ut.load_checkpoint = lambda *a, **k: None
    sys.modules["dassl.utils"] = ut
    src = open(os.path.join(root, "dassl/engine/trainer.py")).read()
    a = src.index("class TrainerBase:")
    b = src.index("class SimpleTrainer(")
    ns = {"torch": torch, "OrderedDict": __import__("collections").OrderedDict, "tolist_if_not": tolist_if_not}
    exec(compile(src[a:b], FORK + "dassl/engine/trainer.py:TrainerBase", "exec"), ns)
    if not hasattr(ns["TrainerBase"], "prograd_backward_and_update"):
        raise SystemExit("their TrainerBase has no prograd_backward_and_update")
    eng = types.ModuleType("dassl.engine")

    class Registry:
        def register(self, *a, **k):
            return lambda cls: cls

    class TrainerX(ns["TrainerBase"]):
        def __init__(self, cfg, classnames):
            super().__init__()
            self.cfg = cfg
            self.device = torch.device("cpu")
            self.dm = C.CN(dataset=C.CN(classnames=classnames))

    eng.TRAINER_REGISTRY = Registry()
    eng.TrainerX = TrainerX
    sys.modules["dassl.engine"] = eng


def install(repo):
    root = tempfile.mkdtemp(prefix="prograd-ref-")
    for f in ["trainers/prograd.py", "clip/model.py"]:
        out = os.path.join(root, f)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            fh.write(C.git_show(repo, PUB + f))
    clip_pkg = types.ModuleType("clip")
    clip_pkg.__path__ = [os.path.join(root, "clip")]
    sys.modules["clip"] = clip_pkg
    model = C.load_module("clip.model", os.path.join(root, "clip", "model.py"))
    cl = types.ModuleType("clip.clip")
    cl.build_model = model.build_model
    cl.tokenize = C.TABLES.tokenize  # REPLACED: the token table
    cl._MODELS = {"tiny": "REPLACED: the tiny CLIP of testdata/clip-tiny"}
    sys.modules["clip.clip"] = cl
    clip_pkg.clip = cl
    tok = types.ModuleType("clip.simple_tokenizer")

    class SimpleTokenizer:
        def encode(self, text):
            return C.TABLES.ids(text)

    tok.SimpleTokenizer = SimpleTokenizer
    sys.modules["clip.simple_tokenizer"] = tok
    sys.modules.setdefault("tqdm", types.SimpleNamespace(tqdm=lambda x, *a, **k: x))  # REPLACED: not installed, unused
    install_dassl_fork(repo)
    pg = C.load_module("prograd_trainer", os.path.join(root, "trainers", "prograd.py"))
    pg.load_clip_to_cpu = lambda cfg: C.load_clip_to_cpu()  # REPLACED: no download; float32 tiny CLIP
    return pg


def cfg_for(lr, temp=T, lam=LAMBDA):
    return C.CN(
        TRAINER=C.CN(COOP=C.CN(N_CTX=N_CTX, CTX_INIT=False, CSC=False, PREC="fp32", CLASS_TOKEN_POSITION="end")),
        DATASET=C.CN(NAME=DATASET),
        INPUT=C.CN(SIZE=(32, 32)),
        MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
        OPTIM=C.optim_cfg(lr, MOM, WD),
        LOSS=C.CN(NAME="prograd", T=temp, LAMBDA=lam),
    )


def trainer(pg, classnames, lr, init=None, temp=T, lam=LAMBDA):
    torch.manual_seed(SEED)
    t = pg.ProGrad(cfg_for(lr, temp, lam), classnames)
    t.build_model()
    if init is not None:
        with torch.no_grad():
            t.model.prompt_learner.ctx.copy_(init)
    t.set_model_mode("train")
    return t


def parts(t, images, labels):
    """The two losses and their gradients, from their modules (recorded before their update;
    the update itself recomputes them)."""
    ctx = t.model.prompt_learner.ctx
    out = t.model(images)
    with torch.no_grad():
        zs = t.zs_clip(images)
    xe, kl = t.criterion(out, zs.detach(), labels)
    ga = torch.autograd.grad(xe, ctx, retain_graph=True)[0]
    gb = torch.autograd.grad(kl, ctx)[0]
    cos = torch.dot((ga / torch.linalg.norm(ga)).flatten(), (gb / torch.linalg.norm(gb)).flatten())
    return out.detach(), zs, xe.detach(), kl.detach(), ga, gb, cos.item()


def step_file(t, images, labels, tokens, template_tokens, meta, init):
    out, zs, xe, kl, ga, gb, cos = parts(t, images, labels)
    m = t.model
    with torch.no_grad():
        tf = m.text_encoder(m.prompt_learner(), m.tokenized_prompts)
        imf = m.image_encoder(images)
    t.batch_idx, t.num_batches = 0, 1
    summary = t.forward_backward({"img": images, "label": labels})
    g = m.prompt_learner.ctx.grad.detach().clone()
    lam = t.cfg.LOSS.LAMBDA
    want = ga - lam * torch.dot(ga.flatten(), (gb / torch.linalg.norm(gb)).flatten()) * gb / torch.linalg.norm(gb) if cos < 0 else ga
    if not torch.allclose(g, want, rtol=1e-4, atol=1e-6 * float(ga.abs().max())):
        raise SystemExit("their projected gradient differs from the recorded parts")
    return {"images": images, "labels": labels, "tokens": tokens, "template_tokens": template_tokens,
            "text_features": tf, "image_features": imf, "zs_text_features": t.zs_clip.text_features,
            "logits": out, "zs_logits": zs, "xe_loss": xe.reshape(1), "kl_loss": kl.reshape(1),
            "grad_xe.prompt_learner.ctx": ga, "grad_kl.prompt_learner.ctx": gb,
            "cos": torch.tensor([cos]), "projected": torch.tensor([int(cos < 0)]),
            "grad.prompt_learner.ctx": g, "step1.prompt_learner.ctx": m.prompt_learner.ctx.detach().clone(),
            "loss": torch.tensor([summary["xe_loss"]])}, cos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(C.TESTDATA, "prograd"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.nn.Module.cuda = lambda self, *a, **k: self  # REPLACED: `self.zs_clip.cuda()` (CPU only)
    repo = C.mirror("PROGRAD_REF", "/work/.mirror/BeierZhu+Prompt-align/repo")
    step_in, rnd_in = C.promptfl_inputs()
    tokens = step_in["tokens"]
    classnames = C.register_classes(tokens)
    C.TABLES.words.update(WORDS)
    pg = install(repo)
    template = pg.CUSTOM_TEMPLATES[DATASET]
    template_tokens = torch.cat([C.TABLES.tokenize(template.format(c)) for c in classnames])
    meta = {"method": "prograd", "n_ctx": N_CTX, "n_cls": len(classnames), "template": template,
            "T": T, "lambda": LAMBDA, "logit_scale": 4.0, "momentum": MOM, "weight_decay": WD,
            "init_std": 0.02, "seed": SEED, "prec": "fp32", "ctx_init": "", "csc": "False",
            "class_token_position": "end", "x_token_id": C.X_ID, "dot_token_id": C.DOT_ID,
            "sot": C.SOT, "eot": C.EOT, "lr_scheduler": "constant",
            "kl_loss": "mean over images of -sum_c softmax(zs/T)_c log softmax(logits/T)_c * T^2",
            "update": "a = grad xe_loss, b = grad kl_loss; if cos(a,b) < 0: g = a - lambda (a.b/|b|) b/|b|, else g = a"}
    os.makedirs(a.out, exist_ok=True)
    t = trainer(pg, classnames, LR)
    drawn = t.model.prompt_learner.ctx.detach().clone()
    # At their random init the two gradients agree on every stored batch (cos 0.5–0.97): the
    # projection only acts once the context has moved. So the fixtures start from the drawn
    # context after PRE_STEPS plain SGD steps (lr PRE_LR, no momentum, no weight decay) of the
    # cross entropy alone (CoOp's loss) on the step batch, through their CustomCLIP.
    ctx = t.model.prompt_learner.ctx
    pre = torch.optim.SGD([ctx], lr=PRE_LR)
    for _ in range(PRE_STEPS):
        loss = torch.nn.functional.cross_entropy(t.model(step_in["images"]), step_in["labels"])
        pre.zero_grad()
        loss.backward()
        pre.step()
    init = ctx.detach().clone()
    meta["init"] = (f"prompt_learner.ctx drawn N(0, 0.02^2) (seed {SEED}; init_random.safetensors), then "
                    f"{PRE_STEPS} SGD steps lr {PRE_LR} (no momentum, no weight decay) of cross entropy alone "
                    "on step.safetensors' images and labels")
    at_drawn = [parts(trainer(pg, classnames, LR), step_in["images"], step_in["labels"])[-1]]
    for c in range(2):
        ims, lbs = rnd_in[f"client{c}.images"], rnd_in[f"client{c}.labels"]
        at_drawn += [parts(trainer(pg, classnames, LR), ims[b:b + 4], lbs[b:b + 4])[-1] for b in range(0, len(ims), 4)]
    C.write_st(os.path.join(a.out, "init_random.safetensors"), {"prompt_learner.ctx": drawn},
               dict(meta, params="init_random",
                    cos_at_drawn="cos(G_ce, G_kd) at this context on the step batch and the round's three batches: "
                                 + ", ".join(f"{x:.3f}" for x in at_drawn)))
    C.write_st(os.path.join(a.out, "init.safetensors"), {"prompt_learner.ctx": init}, dict(meta, params="init"))
    t = trainer(pg, classnames, LR, init)

    # step (conflict: cos < 0) on promptfl's step batch; step_aligned (cos ≥ 0) on the first
    # batch of 4 of promptfl's round clients whose gradients agree.
    images, labels = step_in["images"], step_in["labels"]
    s, cos = step_file(t, images, labels, tokens, template_tokens, meta, init)
    if cos >= 0:
        raise SystemExit(f"step: cos {cos} ≥ 0, the conflict branch is not taken")
    C.write_st(os.path.join(a.out, "step.safetensors"), s, dict(meta, lr=LR, params="init.safetensors", branch="projected"))
    found = None
    for c in range(2):
        ims, lbs = rnd_in[f"client{c}.images"], rnd_in[f"client{c}.labels"]
        for b in range(0, len(ims), 4):
            t = trainer(pg, classnames, LR, init)
            if found is None and parts(t, ims[b:b + 4], lbs[b:b + 4])[-1] >= 0:
                found = (ims[b:b + 4], lbs[b:b + 4])
    if found is None:
        raise SystemExit("no stored batch with agreeing gradients")
    t = trainer(pg, classnames, LR, init)
    s, cos = step_file(t, found[0], found[1], tokens, template_tokens, meta, init)
    if cos < 0:
        raise SystemExit(f"step_aligned: cos {cos} < 0")
    C.write_st(os.path.join(a.out, "step_aligned.safetensors"), s,
               dict(meta, lr=LR, params="init.safetensors", branch="not projected"))

    # the same conflicting step with another temperature and λ (the authors' runs use T 1, λ 1)
    t = trainer(pg, classnames, LR, init, temp=T2, lam=LAMBDA2)
    s, cos = step_file(t, images, labels, tokens, template_tokens, meta, init)
    if cos >= 0:
        raise SystemExit(f"step_t2: cos {cos} ≥ 0")
    C.write_st(os.path.join(a.out, "step_t2.safetensors"), s,
               dict(meta, lr=LR, T=T2, **{"lambda": LAMBDA2}, params="init.safetensors", branch="projected"))

    # round: two clients from init, one local epoch, FedAvg of the context
    rnd = {"tokens": tokens, "template_tokens": template_tokens}
    trained, sizes = [], []
    for c in range(2):
        t = trainer(pg, classnames, ROUND_LR, init)
        ims, lbs = rnd_in[f"client{c}.images"], rnd_in[f"client{c}.labels"]
        rnd[f"client{c}.images"], rnd[f"client{c}.labels"] = ims, lbs
        nb = len(ims) // 4
        xs, ks, cs = [], [], []
        for b in range(nb):
            bi, bl = ims[4 * b:4 * b + 4], lbs[4 * b:4 * b + 4]
            cs.append(parts(t, bi, bl)[-1])
            t.batch_idx, t.num_batches = b, nb
            summ = t.forward_backward({"img": bi, "label": bl})
            xs.append(summ["xe_loss"])
            ks.append(summ["kl_loss"])
        rnd[f"client{c}.batch_xe_losses"] = torch.tensor(xs)
        rnd[f"client{c}.batch_kl_losses"] = torch.tensor(ks)
        rnd[f"client{c}.batch_cos"] = torch.tensor(cs)
        tr = t.model.prompt_learner.ctx.detach().clone()
        rnd[f"client{c}.trained.prompt_learner.ctx"] = tr
        trained.append(tr)
        sizes.append(len(ims))
    n = sum(sizes)
    rnd["global.prompt_learner.ctx"] = sum(tr * (ni / n) for tr, ni in zip(trained, sizes))
    C.write_st(os.path.join(a.out, "round.safetensors"), rnd,
               dict(meta, lr=ROUND_LR, batch_size=4, local_epochs=1, client_sizes=sizes,
                    aggregated="prompt_learner.ctx", local="[]"))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
