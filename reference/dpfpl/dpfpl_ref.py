#!/usr/bin/env python3
"""Reference harness: the authors' DP-FPL training step and evaluation, timed.

Imports trainers/DP_FPL.py (PromptLearner with factorization "dpfpl",
factorize_ctx, orthogonalize, compute_full_grad, TextEncoder, CustomCLIP,
DP_FPL.build_model, forward_pass, backward_pass), their clip/model.py and
their vendored Dassl (optim's build_optimizer / build_lr_scheduler, metrics'
compute_accuracy, engine/trainer.py's TrainerBase) from a checkout of
github.com/linhhtran/DP-FPL (--repo). Times, on CPU in float32, at the
setting of `pfedmma bench train --method dpfpl`: ViT-B/16 shapes with random
weights, 24 classes, batch 32 of 224x224 images, the code's defaults
(federated_main.py's arguments: n_ctx 16, rank 8, norm_thresh 10, noise 0 —
privacy off, as pfedmma's default; --noise turns it on with their
calibration, 100 rounds, delta 1e-5), SGD lr 0.001 momentum 0.9 wd 5e-4
(their --lr and Dassl's defaults) on the prompt learner.

A training step is one client's turn in federated_main.py's batch loop
(a script, not importable: its statements are restated here for one
client, at a round after the first): load the client's four prompt
tensors (load_state_dict, strict=False), their train_forward (set_model_mode
train, forward_pass: the frozen image encoder, factorize_ctx — a random
projection, two Gram-Schmidt passes — the 24 prompts through the text
encoder, CE, zero_grad, backward, the clipping and noise when --noise > 0,
compute_full_grad for the local context), the state_dict copies of the
four tensors, the average of the global gradients (one client) plus the
server's noise when --noise > 0, the tensors loaded back, their
train_backward (backward_pass: the global gradient set, SGD step) and the
copies again. An evaluation batch is their test's model_inference: the
model's forward in eval mode under no_grad (factorize_ctx and the text
encoder run in every batch).

What is not theirs: Dassl's SimpleTrainer/TrainerX constructor (data
managers, evaluator) is replaced by one that takes the config and the
batch size (build_model reads only the clients' batch size from the data
manager, for the noise calibration); load_clip_to_cpu returns the
random-weight float32 ViT-B/16 built by their clip/model.py with the
design details their loader passes; clip.tokenize and the BPE tokenizer
are the harness's; .cuda()/.to('cuda') stay on the CPU.

Usage: /usr/bin/python3 dpfpl_ref.py --repo CHECKOUT [--steps 10] [--image 224] [--noise EPS]
Prints the JSON that `pfedmma bench train --method dpfpl --reference FILE` reads.
"""
import collections
import copy
import sys
import types

import os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402


def install_their_dassl(repo, torch):
    """Their vendored Dassl under the names DP_FPL.py imports
    (Dassl.dassl.*): optim and metrics as shipped, TrainerBase compiled
    from engine/trainer.py (whose module imports the whole framework), and
    a TrainerX whose constructor takes the config and the batch size."""
    for name in ["Dassl", "Dassl.dassl", "Dassl.dassl.optim", "Dassl.dassl.engine", "Dassl.dassl.metrics",
                 "Dassl.dassl.utils"]:
        m = types.ModuleType(name)
        m.__path__ = [f"{repo}/{name.replace('.', '/')}"]
        sys.modules[name] = m
    d = f"{repo}/Dassl/dassl"
    rc.load("Dassl.dassl.optim.radam", f"{d}/optim/radam.py")
    optim = rc.load("Dassl.dassl.optim.optimizer", f"{d}/optim/optimizer.py")
    sched = rc.load("Dassl.dassl.optim.lr_scheduler", f"{d}/optim/lr_scheduler.py")
    sys.modules["Dassl.dassl.optim"].build_optimizer = optim.build_optimizer
    sys.modules["Dassl.dassl.optim"].build_lr_scheduler = sched.build_lr_scheduler
    acc = rc.load("Dassl.dassl.metrics.accuracy", f"{d}/metrics/accuracy.py")
    sys.modules["Dassl.dassl.metrics"].compute_accuracy = acc.compute_accuracy

    def tolist_if_not(x):  # Dassl/dassl/utils/tools.py
        return x if isinstance(x, list) else [x]

    ut = sys.modules["Dassl.dassl.utils"]
    ut.tolist_if_not = tolist_if_not
    ut.load_pretrained_weights = lambda *a, **k: None  # MODEL.INIT_WEIGHTS is empty
    path = f"{d}/engine/trainer.py"
    src = open(path).read()
    a, b = src.index("class TrainerBase:"), src.index("class SimpleTrainer(")
    ns = {"torch": torch, "OrderedDict": collections.OrderedDict, "tolist_if_not": tolist_if_not}
    exec(compile(src[a:b], path, "exec"), ns)

    class TrainerX(ns["TrainerBase"]):
        """Replaces SimpleTrainer/TrainerX.__init__ (data loaders,
        evaluator): the caller gives the config, the class names and the
        batch size; model_inference is SimpleTrainer's."""

        def __init__(self, cfg, classnames, batch_size):
            super().__init__()
            self.cfg = cfg
            self.device = torch.device("cpu")
            self.dm = rc.ns(dataset={"classnames": classnames})
            self.dm.fed_train_loader_x_dict = {i: rc.ns(batch_size=batch_size) for i in range(cfg.DATASET.USERS)}

        def model_inference(self, input):  # SimpleTrainer's
            return self.model(input)

    tr = types.ModuleType("Dassl.dassl.engine.trainer")
    tr.TrainerX = TrainerX
    sys.modules["Dassl.dassl.engine.trainer"] = tr


def main():
    ap = rc.parser(__doc__.splitlines()[0])
    ap.add_argument("--noise", type=float, default=0.0,
                    help="their --noise (the privacy budget ε; 0 = no clipping and no noise, the default)")
    args = ap.parse_args()
    torch, ob = rc.setup(args)

    rc.cuda_is_cpu()
    model_py = rc.load_clip(args.repo)
    install_their_dassl(args.repo, torch)
    mod = rc.load("trainers_dpfpl", f"{args.repo}/trainers/DP_FPL.py")
    design = {"trainer": "DP_FPL", "vision_depth": 0, "language_depth": 0, "vision_ctx": 0, "language_ctx": 0}
    mod.load_clip_to_cpu = lambda cfg: rc.vit_b16(model_py, args.image, design)

    n_ctx, rank, norm, users = 16, 8, 10.0, 1
    cfg = rc.ns(FACTORIZATION="dpfpl", RANK=rank, NORM_THRESH=norm, NOISE=args.noise,
                TRAINER={"NAME": "DP_FPL", "DP_FPL": {"N_CTX": n_ctx, "PREC": "fp32", "CLASS_TOKEN_POSITION": "end"}},
                DATASET={"USERS": users}, INPUT={"SIZE": (args.image, args.image)},
                MODEL={"BACKBONE": {"NAME": "ViT-B/16"}, "INIT_WEIGHTS": ""},
                OPTIM={"NAME": "sgd", "LR": 0.001, "WEIGHT_DECAY": 5e-4, "MOMENTUM": 0.9, "SGD_DAMPNING": 0,
                       "SGD_NESTEROV": False, "RMSPROP_ALPHA": 0.99, "ADAM_BETA1": 0.9, "ADAM_BETA2": 0.999,
                       "STAGED_LR": False, "NEW_LAYERS": (), "BASE_LR_MULT": 0.1, "LR_SCHEDULER": "single_step",
                       "STEPSIZE": (-1,), "GAMMA": 0.1, "MAX_EPOCH": 100, "ROUND": 100, "WARMUP_EPOCH": 0,
                       "WARMUP_TYPE": "constant", "WARMUP_CONS_LR": 1e-5, "WARMUP_MIN_LR": 1e-5,
                       "WARMUP_RECOUNT": True})
    classnames = [f"class_{i}" for i in range(args.classes)]
    trainer = mod.DP_FPL(cfg, classnames, args.batch)
    trainer.build_model()
    model = trainer.model
    rc.check_prompts("dpfpl_ref", model.tokenized_prompts, args.classes)
    std = trainer.std / users if args.noise > 0 else 0.0  # federated_main.py

    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes
    batch = {"img": images, "label": labels}
    keys = ["global_ctx", "local_ctx", "local_u_ctx", "local_v_ctx"]
    # the client's tensors after round 0 (federated_main.py's local_weights[idx])
    local = {f"prompt_learner.{k}": copy.deepcopy(getattr(model.prompt_learner, k).data) for k in keys}

    def train_step():  # federated_main.py's batch loop, one client, a round after the first
        trainer.set_model_mode("train")
        model.load_state_dict(local, strict=False)
        trainer.train_forward(idx=0, train_iter=iter([batch]))
        w = model.state_dict()
        gradients = [model.prompt_learner.global_ctx.grad.data]
        kept = {k: copy.deepcopy(w[k]) for k in local}
        avg = sum(gradients) / users
        if args.noise > 0:
            avg += torch.normal(0, std, size=avg.shape, device=avg.device)
        local.update(kept)
        model.load_state_dict(local, strict=False)
        trainer.train_backward(avg_global_gradient=avg)
        w = model.state_dict()
        local.update({k: copy.deepcopy(w[k]) for k in local})

    def eval_step():  # test: model_inference under no_grad
        trainer.set_model_mode("eval")
        with torch.no_grad():
            model.training = False
            trainer.model_inference(images)
            model.training = True

    rc.run(args, torch, ob, "dpfpl", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad],
           {"n_ctx": n_ctx, "rank": rank, "norm_thresh": norm, "noise": args.noise})


if __name__ == "__main__":
    main()
