"""DP-FPL reference fixtures (testdata/dpfpl) from the authors' code
(linhhtran/DP-FPL): trainers/DP_FPL.py (PromptLearner with factorization
"dpfpl", factorize_ctx, orthogonalize, compute_full_grad, TextEncoder,
CustomCLIP, DP_FPL.build_model with its noise calibration, forward_pass with
the clipping and noise, backward_pass), their clip/model.py (build_model) and
their vendored Dassl (optim, metrics, engine/trainer.py's TrainerBase), on
the tiny CLIP, float32, CPU.

Replacements (each also in reference/dpfpl/README.md):
- clip.clip (download, torchvision) and the BPE tokenizer: common.py's token
  tables; load_clip_to_cpu: the tiny CLIP through their build_model with the
  design details their loader passes, convert_weights (fp16) skipped;
- Dassl's DataManager: the batches are given (the data manager only supplies
  max_batch, the batch size, here set to the fixtures' batch size);
- torch.normal is wrapped to record every draw (Ω of factorize_ctx, the
  noise on the factors' gradients, the server's noise) in call order; the
  draws are stored so the Go replay uses the same ones;
- federated_main.py's loop (a script, not importable) is restated for one
  batch per client: forward_pass per client, the mean of the clipped global
  gradients plus torch.normal(0, std / USERS), backward_pass per client — with
  one trainer (model and optimizer) per client instead of their single shared
  one (their loop shares the SGD momentum buffers between clients and steps
  every client's local context with the last client's gradient; see the
  README).
"""
import os
import sys
import types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "61"))
N_CTX, RANK = 4, 2
EPS, DELTA, ROUNDS = 0.4, 1e-5, 100
LR, ROUND_LR, MOM, WD = 0.001, 0.01, 0.9, 5e-4
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "dpfpl"))

DRAWS = []
_normal = torch.normal


def recording_normal(*a, **k):
    """REPLACED torch.normal: the same draw, recorded."""
    x = _normal(*a, **k)
    DRAWS.append(x.detach().clone())
    return x


def is_draw(name):
    return name == "server_noise" or name.endswith((".omega", ".noise_u", ".noise_v"))


def write(path, tensors, meta):
    """common.write_st, with the recorded draws stored as F64 (their exact
    float32 values): they are the step's inputs, not outputs to compare."""
    C.write_st(path, {k: v for k, v in tensors.items() if not is_draw(k)}, meta)
    draws = {k: v.detach().double().contiguous() for k, v in tensors.items() if is_draw(k)}
    if not draws:
        return
    with open(path, "rb") as f:
        b = f.read()
    n = C.struct.unpack("<Q", b[:8])[0]
    h = C.json.loads(b[8:8 + n])
    blob = b[8 + n:]
    off = len(blob)
    for k in sorted(draws):
        raw = draws[k].numpy().tobytes()
        h[k] = {"dtype": "F64", "shape": list(draws[k].shape), "data_offsets": [off, off + len(raw)]}
        blob += raw
        off += len(raw)
    hb = C.json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(C.struct.pack("<Q", len(hb)) + hb + blob)


def install_their_dassl(repo):
    """Their vendored Dassl under the names DP_FPL.py imports (Dassl.dassl.*)."""
    root = C.tempfile.mkdtemp(prefix="dpfpl-dassl-")
    C.extract(repo, ["Dassl/dassl/optim/optimizer.py", "Dassl/dassl/optim/lr_scheduler.py", "Dassl/dassl/optim/radam.py",
                     "Dassl/dassl/metrics/accuracy.py", "Dassl/dassl/engine/trainer.py"], root)
    for name in ["Dassl", "Dassl.dassl", "Dassl.dassl.optim", "Dassl.dassl.engine", "Dassl.dassl.metrics", "Dassl.dassl.utils"]:
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = m
    o = C.load_module("Dassl.dassl.optim.optimizer", os.path.join(root, "Dassl/dassl/optim/optimizer.py"))
    s = C.load_module("Dassl.dassl.optim.lr_scheduler", os.path.join(root, "Dassl/dassl/optim/lr_scheduler.py"))
    sys.modules["Dassl.dassl.optim"].build_optimizer = o.build_optimizer
    sys.modules["Dassl.dassl.optim"].build_lr_scheduler = s.build_lr_scheduler
    acc = C.load_module("Dassl.dassl.metrics.accuracy", os.path.join(root, "Dassl/dassl/metrics/accuracy.py"))
    sys.modules["Dassl.dassl.metrics"].compute_accuracy = acc.compute_accuracy

    def tolist_if_not(x):  # Dassl/dassl/utils/tools.py
        if not isinstance(x, list):
            x = [x]
        return x

    ut = sys.modules["Dassl.dassl.utils"]
    ut.tolist_if_not = tolist_if_not
    ut.load_pretrained_weights = lambda *a, **k: None  # MODEL.INIT_WEIGHTS is empty
    # TrainerBase verbatim from their Dassl/dassl/engine/trainer.py (with
    # train_forward / train_backward, which the federated loop calls)
    src = open(os.path.join(root, "Dassl/dassl/engine/trainer.py")).read()
    a, b = src.index("class TrainerBase:"), src.index("class SimpleTrainer(")
    ns = {"torch": torch, "OrderedDict": __import__("collections").OrderedDict, "tolist_if_not": tolist_if_not}
    exec(compile(src[a:b], "Dassl/dassl/engine/trainer.py:TrainerBase", "exec"), ns)

    class TrainerX(ns["TrainerBase"]):
        """REPLACED SimpleTrainer/TrainerX.__init__ (data loaders, evaluator):
        the caller gives cfg, the class names and the clients' batch sizes."""

        def __init__(self, cfg, classnames, batch_sizes):
            super().__init__()
            self.cfg = cfg
            self.device = torch.device("cpu")
            self.dm = C.CN(dataset=C.CN(classnames=classnames),
                           fed_train_loader_x_dict={i: C.CN(batch_size=b) for i, b in enumerate(batch_sizes)})

    tr = types.ModuleType("Dassl.dassl.engine.trainer")
    tr.TrainerX = TrainerX
    sys.modules["Dassl.dassl.engine.trainer"] = tr


def load_clip(model_mod):
    """REPLACED load_clip_to_cpu: the tiny CLIP through their build_model with
    the design details their loader passes, without convert_weights (fp16)."""
    def load(cfg):
        sd, _ = C.read_st(os.path.join(C.TESTDATA, "clip-tiny", "openai.safetensors"))
        sd = dict(sd)
        sd["logit_scale"] = sd["logit_scale"].reshape(())
        design = {"trainer": "DP_FPL", "vision_depth": 0, "language_depth": 0, "vision_ctx": 0, "language_ctx": 0}
        saved, model_mod.convert_weights = model_mod.convert_weights, (lambda m: None)
        model = model_mod.build_model(sd, design)
        model_mod.convert_weights = saved
        for k, v in model.state_dict().items():
            if not torch.equal(v, sd[k]):
                raise SystemExit(f"weight {k} differs after loading")
        return model
    return load


def cfg_for(noise, norm, users, lr):
    return C.CN(
        FACTORIZATION="dpfpl", RANK=RANK, NORM_THRESH=norm, NOISE=noise,
        TRAINER=C.CN(NAME="DP_FPL", DP_FPL=C.CN(N_CTX=N_CTX, PREC="fp32", CLASS_TOKEN_POSITION="end")),
        DATASET=C.CN(USERS=users),
        INPUT=C.CN(SIZE=(32, 32)),
        MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
        OPTIM=C.CN(**C.optim_cfg(lr, MOM, WD), ROUND=ROUNDS),
    )


def trainer(mod, names, noise, norm, batch_sizes, lr, init=None):
    t = mod.DP_FPL(cfg_for(noise, norm, len(batch_sizes), lr), names, batch_sizes)
    t.build_model()
    if init is not None:
        pl = t.model.prompt_learner
        with torch.no_grad():
            pl.global_ctx.copy_(init["prompt_learner.global_ctx"])
            pl.local_ctx.copy_(init["prompt_learner.local_ctx"])
    return t


def forward(t, images, labels):
    """Their forward_pass with the intermediates captured by hooks: the
    image and text encoders' outputs, the logits, ∂loss/∂global_ctx before
    clipping (= ∂loss/∂ctx) and the draws it made."""
    m, pl = t.model, t.model.prompt_learner
    got = {}
    hs = [m.image_encoder.register_forward_hook(lambda mod, i, o: got.__setitem__("image_features", o.detach().clone())),
          m.text_encoder.register_forward_hook(lambda mod, i, o: got.__setitem__("text_features", o.detach().clone())),
          m.register_forward_hook(lambda mod, i, o: got.__setitem__("logits", o.detach().clone()))]
    hg = pl.global_ctx.register_hook(lambda g: got.__setitem__("raw_grad", g.detach().clone()))
    n0 = len(DRAWS)
    summ = t.forward_pass({"img": images, "label": labels})
    for h in hs:
        h.remove()
    hg.remove()
    draws = DRAWS[n0:]
    got["omega"] = draws[0]
    if len(draws) == 3:
        got["noise_u"], got["noise_v"] = draws[1], draws[2]
    elif len(draws) != 1:
        raise SystemExit(f"forward_pass drew {len(draws)} times, expected 1 or 3")
    got["loss"] = torch.tensor([summ["loss"]])
    return got


def write_step(mod, names, step, tokens, init, noise, norm, name):
    images, labels = step["images"], step["labels"]
    B = len(labels)
    torch.manual_seed(SEED + 1)
    t = trainer(mod, names, noise, norm, [B], LR, init)
    pl = t.model.prompt_learner
    got = forward(t, images, labels)
    u, v = pl.local_u_ctx.detach().clone(), pl.local_v_ctx.detach().clone()
    out = {"images": images, "labels": labels, "tokens": tokens,
           "image_features": got["image_features"], "text_features": got["text_features"], "logits": got["logits"],
           "loss": got["loss"], "raw_grad": got["raw_grad"],
           "local_u_ctx": u, "local_v_ctx": v, "residual": pl.local_ctx.detach() - u @ v,
           "client0.omega": got["omega"]}
    if noise > 0:
        out["client0.noise_u"], out["client0.noise_v"] = got["noise_u"], got["noise_v"]
        out["noise_std"] = torch.tensor([t.std])
    else:
        out["noise_std"] = torch.tensor([0.0])
    for p in ["global_ctx", "local_ctx", "local_u_ctx", "local_v_ctx"]:
        out["grad.prompt_learner." + p] = getattr(pl, p).grad.detach().clone()
    t.model_update()  # their optimizer step (all four parameters)
    for p in ["global_ctx", "local_ctx"]:
        out["step1.prompt_learner." + p] = getattr(pl, p).detach().clone()
    meta = {"method": "dpfpl", "factorization": "dpfpl", "n_ctx": N_CTX, "rank": RANK, "norm_thresh": norm,
            "noise": noise, "delta": DELTA, "rounds": ROUNDS, "batch_size": B, "num_users": 1,
            "lr": LR, "momentum": MOM, "weight_decay": WD, "logit_scale": 4.0, "seed": SEED + 1,
            "prec": "fp32", "params": "init.safetensors"}
    write(os.path.join(OUT, name), out, meta)
    return out


def main():
    repo = C.mirror("DPFPL_REF", "/work/.mirror/linhhtran+DP-FPL/repo")
    C.import_reference(repo, ["trainers/DP_FPL.py"])
    install_their_dassl(repo)
    torch.normal = recording_normal
    mod = C.load_module("trainers_dpfpl", os.path.join(sys.path[0], "trainers/DP_FPL.py"))
    mod.load_clip_to_cpu = load_clip(sys.modules["clip.model"])
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    torch.manual_seed(SEED)
    t0 = trainer(mod, names, 0.0, 10.0, [6], LR)
    pl = t0.model.prompt_learner
    init = {"prompt_learner.global_ctx": pl.global_ctx.detach().clone(), "prompt_learner.local_ctx": pl.local_ctx.detach().clone()}
    tokens = t0.model.tokenized_prompts.clone()
    C.write_st(os.path.join(OUT, "init.safetensors"), init, {"method": "dpfpl", "n_ctx": N_CTX, "rank": RANK, "seed": SEED})

    # without noise: no clipping, the factorisation and compute_full_grad only
    # (its raw gradients also set the clipping threshold of the noisy step)
    # with noise (ε = 0.4): the clipping threshold at a third of the raw
    # gradient's norm, so that every clip is active
    dry = write_step(mod, names, step, tokens, init, 0.0, 10.0, "step_nodp.safetensors")
    norm = float(min(dry["raw_grad"].norm(), dry["grad.prompt_learner.local_u_ctx"].norm(), dry["grad.prompt_learner.local_v_ctx"].norm())) / 3
    norm = float(f"{norm:.3g}")
    write_step(mod, names, step, tokens, init, EPS, norm, "step.safetensors")

    # a round: two clients of one batch of 4 images each (the first 4 of
    # each client of testdata/promptfl's round), as federated_main.py's loop
    # runs one batch: forward_pass on every client, the server's noisy mean
    # of the clipped global gradients, backward_pass on every client.
    B, users = 4, 2
    torch.manual_seed(SEED + 2)
    ts = [trainer(mod, names, EPS, norm, [B] * users, ROUND_LR, init) for _ in range(users)]
    res = {"tokens": tokens}
    global_gradients = []
    for i, t in enumerate(ts):
        ims, lab = rnd[f"client{i}.images"][:B], rnd[f"client{i}.labels"][:B]
        got = forward(t, ims, lab)
        res[f"client{i}.images"], res[f"client{i}.labels"] = ims, lab
        res[f"client{i}.batch_losses"] = got["loss"]
        for k in ["omega", "noise_u", "noise_v"]:
            res[f"client{i}.{k}"] = got[k]
        global_gradients.append(t.model.prompt_learner.global_ctx.grad.data)
    # federated_main.py: std = local_trainer.std / USERS; the mean; the noise
    std = ts[0].std / users
    avg_global_gradient = sum(global_gradients) / users
    n0 = len(DRAWS)
    noise = torch.normal(0, std, size=avg_global_gradient.shape, device=avg_global_gradient.device)
    avg_global_gradient += noise
    res["server_noise"] = DRAWS[n0]
    kept = avg_global_gradient.clone()
    for t in ts:
        t.train_backward(avg_global_gradient=avg_global_gradient)
    if not torch.equal(kept, avg_global_gradient):
        raise SystemExit("backward_pass changed the shared mean gradient")
    g0 = ts[0].model.prompt_learner.global_ctx.detach().clone()
    for i, t in enumerate(ts):
        pl = t.model.prompt_learner
        if not torch.equal(pl.global_ctx.detach(), g0):
            raise SystemExit("the clients' global contexts differ after backward_pass")
        res[f"client{i}.trained.prompt_learner.local_ctx"] = pl.local_ctx.detach().clone()
    res["global.prompt_learner.global_ctx"] = g0
    write(os.path.join(OUT, "round.safetensors"), res,
               {"method": "dpfpl", "factorization": "dpfpl", "n_ctx": N_CTX, "rank": RANK, "norm_thresh": norm,
                "noise": EPS, "delta": DELTA, "rounds": ROUNDS, "num_users": users, "server_std": std,
                "lr": ROUND_LR, "momentum": MOM, "weight_decay": WD, "logit_scale": 4.0, "seed": SEED + 2,
                "batch_size": B, "local_epochs": 1, "client_sizes": str([B] * users), "prec": "fp32",
                "params": "init.safetensors", "aggregated": "prompt_learner.global_ctx",
                "aggregation": "uniform mean + N(0, (std/USERS)^2) on the gradient", "local": "['prompt_learner.local_ctx']"})
    print("dpfpl fixtures written to", OUT, "norm_thresh", norm)


if __name__ == "__main__":
    main()
