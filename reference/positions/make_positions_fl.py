"""CoOp class-token positions "middle" and "front" for the federated prompt
methods FedPGP, FedOTP and pFedMoAP (testdata/coop-positions/<method>-<pos>/),
made from the authors' trainers on the tiny CLIP, float32, CPU:

- FedPGP: trainers/fedpgp.py as shipped in sajjad-ucsb/pFedMMA (PromptLearner,
  TextEncoder, CustomCLIP, FedPGP.build_model / forward_backward), with that
  repository's clip/model.py;
- FedOTP: trainers/GLP_OT.py of HongxiaLee/FedOTP (PromptLearner, CustomCLIP
  with the optimal transport, GLP_OT.build_model / forward_backward), with
  their clip/model.py (the image encoder that keeps every token);
- pFedMoAP: trainers/pfedmoap.py of ljaiverson/pFedMoAP (PromptLearner,
  CustomCLIP with the gate, download_nonlocal_ctx, PFEDMOAP.build_model /
  forward_backward) and the TextEncoder of their trainers/promptfl.py.

Replacements as common.py (tiny CLIP instead of the download, token tables for
clip.tokenize, Dassl's optim/metrics/TrainerBase; data loaders replaced by the
stored batches), plus: the repositories import Dassl as `Dassl.dassl.*`, which
is aliased to the same stand-ins, and names those imports pull in but these
trainers never call (DataManager, Registry, ...) are inert placeholders.

Bugs of the authors' code fixed here, each the smallest change that lets
"middle"/"front" run at all (the same fixes pfedmoma implements):
- FedPGP: the middle and front branches of PromptLearner.forward build only
  `prompts` (context sigma + U·V) and then return the undefined
  `prompts_sigma` and `prompts_UV` (UnboundLocalError). The fix applies the
  same branch to sigma and to U·V. The anchor (`embedding`, the literal
  "X X X X {class}." rows) is left in its written order, as their code has it.
- FedOTP: the middle and front branches loop over `range(self.n_cls)` and
  build only the first prompt's n_cls rows of the N·n_cls the text encoder
  gets (a shape error for N = 2). The fix loops over all N·n_cls rows,
  with name_lens[i % n_cls].
- pFedMoAP: none (its PromptLearner is CoOp's).

The parameters start from the methods' own fixtures (testdata/<method>/init,
the authors' draws) and the inputs are the promptfl/ batches, so the files
differ from testdata/<method>/ only by the class-token position."""
import os
import re
import sys
import types

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "coop-positions"))
MOM, WD = 0.9, 5e-4
POSITIONS = ("middle", "front")


# ------------------------------------------------------------ reference code
class _Inert:
    """Placeholder for names the trainers import but never call here."""

    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return self


def _permissive(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__getattr__ = lambda attr: _Inert  # PEP 562: any other name
    m.__path__ = []
    sys.modules[name] = m
    return m


def import_trainer(repo, trainer, extra=(), clip_extra=()):
    """Extracts trainer (+ extra files) of a mirror, installs the stand-ins
    (common.import_reference) and the Dassl.dassl.* aliases; returns the
    temporary root."""
    root = C.import_reference(repo, [trainer] + list(extra) + list(clip_extra))
    dassl_utils = sys.modules["dassl.utils"]
    _permissive("Dassl")
    _permissive("Dassl.dassl")
    _permissive("Dassl.dassl.engine", TrainerX=sys.modules["dassl.engine"].TrainerX,
                TRAINER_REGISTRY=sys.modules["dassl.engine"].TRAINER_REGISTRY)
    _permissive("Dassl.dassl.engine.trainer", TrainerX=sys.modules["dassl.engine"].TrainerX)
    _permissive("Dassl.dassl.metrics", compute_accuracy=sys.modules["dassl.metrics"].compute_accuracy)
    _permissive("Dassl.dassl.optim", build_optimizer=sys.modules["dassl.optim"].build_optimizer,
                build_lr_scheduler=sys.modules["dassl.optim"].build_lr_scheduler)
    _permissive("Dassl.dassl.utils", tolist_if_not=dassl_utils.tolist_if_not,
                load_pretrained_weights=dassl_utils.load_pretrained_weights, load_checkpoint=dassl_utils.load_checkpoint,
                count_num_param=lambda model: sum(p.numel() for p in model.parameters()))
    _permissive("Dassl.dassl.data")
    # trainers/ has no __init__.py in these repositories: a namespace package
    pkg = types.ModuleType("trainers")
    pkg.__path__ = [os.path.join(root, "trainers")]
    sys.modules["trainers"] = pkg
    return root


def load_clip(design):
    """The repository's clip.build_model on the tiny CLIP's weights (their
    load_clip_to_cpu downloads the OpenAI weights), float32."""
    sd, _ = C.read_st(os.path.join(C.TESTDATA, "clip-tiny", "openai.safetensors"))
    build = sys.modules["clip.clip"].build_model
    model = build(dict(sd), design) if design else build(dict(sd))
    model = model.float()
    model.load_state_dict(sd)  # build_model rounded the weights to float16
    return model.eval()


def patch_source(root, path, fn):
    p = os.path.join(root, path)
    src = open(p).read()
    new = fn(src)
    if new == src:
        raise SystemExit(f"{path}: patch did not apply")
    open(p, "w").write(new)


def fedpgp_fix(src):
    """FedPGP: the middle and front branches applied to sigma and U·V too."""
    def dup(m):
        block = m.group(0)
        out = block
        for var, name in (("sigma", "prompts_sigma"), ("UV", "prompts_UV")):
            b = re.sub(r"\bctx\b", var, block)
            b = re.sub(r"\bprompts\b", name, b)
            b = re.sub(r"\bctx_i\b", var + "_i", b)
            b = re.sub(r"\bctx_i_half([12])\b", var + r"_i_half\1", b)
            b = b.split("\n", 1)[1]  # drop the elif line
            out += "\n" + b
        return out
    # each branch: from its elif line up to (not including) the next elif/else at the same indent
    pat = re.compile(r"        elif self\.class_token_position == \"(?:middle|front)\":\n(?:(?!        el).*\n)+?(?=        el)")
    return pat.sub(lambda m: dup(m).rstrip("\n") + "\n", src)


def fedotp_fix(src):
    """FedOTP: the middle and front branches over all N·n_cls rows."""
    a = src.index("class PromptLearner")
    b = src.index("class CustomCLIP")
    pl = src[a:b].replace("for i in range(self.n_cls):", "for i in range(self.N * self.n_cls):")
    pl = pl.replace("name_len = self.name_lens[i]", "name_len = self.name_lens[i % self.n_cls]")
    return src[:a] + pl + src[b:]


# ------------------------------------------------------------------ helpers
def train_batches(t, ims, lab, bs=4):
    t.set_model_mode("train")
    nb = (len(lab) + bs - 1) // bs
    t.num_batches, losses = nb, []
    for b in range(nb):
        t.batch_idx = b
        losses.append(t.forward_backward({"img": ims[bs * b:bs * b + bs], "label": lab[bs * b:bs * b + bs]})["loss"])
    return torch.tensor(losses)


def base_meta(method, pos, names, pl, n_ctx):
    return {"method": method, "n_ctx": n_ctx, "n_cls": len(names), "class_token_position": pos, "csc": False,
            "x_token_id": C.X_ID, "dot_token_id": C.DOT_ID, "sot": C.SOT, "eot": C.EOT, "logit_scale": 4.0,
            "momentum": MOM, "weight_decay": WD, "init_std": 0.02, "name_lens": str(list(pl.name_lens))}


def check_rows(prompts, n_rows):
    if prompts.shape[0] != n_rows:
        raise SystemExit(f"prompt learner built {prompts.shape[0]} rows, want {n_rows}")


# ------------------------------------------------------------------- FedPGP
def fedpgp(step, rnd, names):
    repo = C.mirror("PFEDMMA_REF", "/work/.mirror/sajjad-ucsb+pFedMMA/repo")
    root = import_trainer(repo, "trainers/fedpgp.py", clip_extra=["clip/gsl.py"])
    patch_source(root, "trainers/fedpgp.py", fedpgp_fix)
    mod = C.load_module("trainers_fedpgp", os.path.join(root, "trainers/fedpgp.py"))
    mod.load_clip_to_cpu = lambda cfg: load_clip(None)
    init, imeta = C.read_st(os.path.join(C.TESTDATA, "fedpgp", "init.safetensors"))
    n_ctx, b, N, mu, temp = 4, 8, 1, 0.5, 0.5

    def trainer(pos, lr):
        cfg = C.CN(TRAINER=C.CN(FEDPGP=C.CN(N_CTX=n_ctx, CTX_INIT="", CSC=False, PREC="fp32", CLASS_TOKEN_POSITION=pos,
                                            BOTTLENECK=b, N=N, mu=mu, temp=temp)),
                   INPUT=C.CN(SIZE=(32, 32)), MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
                   DATASET=C.CN(NAME="tiny"), OPTIM=C.optim_cfg(lr, MOM, WD))
        t = mod.FedPGP(cfg, names)
        t.build_model()
        t.model.prompt_learner.load_state_dict({k.split(".", 1)[1]: v for k, v in init.items()}, strict=False)
        return t

    params = ["prompt_learner.U", "prompt_learner.V", "prompt_learner.sigma"]
    for pos in POSITIONS:
        out_dir = os.path.join(OUT, "fedpgp-" + pos)
        t = trainer(pos, 0.001)
        m, pl = t.model, t.model.prompt_learner
        meta = {**base_meta("fedpgp", pos, names, pl, n_ctx), "seed": imeta["seed"], "bottleneck": b, "num_prompt": N,
                "mu": mu, "temp": temp, "loss": "loss_ce + mu * loss_con",
                "anchor": "text_features_0 = text encoder of the literal 'X X X X {class}.' rows in written order (the authors' `embedding`), whatever the position"}
        C.write_st(os.path.join(out_dir, "init.safetensors"), init, {"method": "fedpgp", "n_ctx": n_ctx, "bottleneck": b,
                                                                      "num_prompt": N, "seed": imeta["seed"], "class_token_position": pos})
        images, labels = step["images"], step["labels"]
        tok = m.tokenized_prompts
        with torch.no_grad():
            embedding, p_sigma, p_uv, prompts = pl()
            check_rows(prompts, len(names) * N)
            f0, fs, fuv, fp = (m.text_encoder(x, tok) for x in (embedding, p_sigma, p_uv, prompts))
            m.train()
            tf0, tfs, _, tfp, logits = m(images)
            cos = torch.nn.CosineSimilarity(dim=-1)
            posi, nega = cos(tf0, tfs), cos(tfs, tfp)
            loss_con = F.cross_entropy(torch.stack([posi, nega], 1) / temp, torch.zeros(len(posi), dtype=torch.long))
            loss_ce = F.cross_entropy(logits, labels)
        t.set_model_mode("train")
        t.batch_idx, t.num_batches = 0, 1
        summ = t.forward_backward({"img": images, "label": labels})
        out = {"images": images, "labels": labels, "tokens": tok, "prompts": prompts, "image_features": m.image_encoder(images).detach(), "text_features": fp,
               "text_features_sigma": fs, "text_features_UV": fuv, "text_features_0": f0, "cos_pos": posi, "cos_neg": nega,
               "logits": logits, "loss_ce": loss_ce.reshape(1), "loss_con": loss_con.reshape(1),
               "loss": torch.tensor([summ["loss"]])}
        for p in params:
            prm = getattr(pl, p.split(".")[1])
            out["grad." + p] = prm.grad.detach().clone()
            out["step1." + p] = prm.detach().clone()
        C.write_st(os.path.join(out_dir, "step.safetensors"), out, {**meta, "lr": 0.001, "params": "init.safetensors"})
        res, trained, sizes = {"tokens": tok}, [], []
        for ci in range(2):
            ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
            tc = trainer(pos, 0.01)
            res[f"client{ci}.batch_losses"] = train_batches(tc, ims, lab)
            res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
            for p in params:
                res[f"client{ci}.trained.{p}"] = getattr(tc.model.prompt_learner, p.split(".")[1]).detach().clone()
            trained.append(res[f"client{ci}.trained.prompt_learner.sigma"])
            sizes.append(len(lab))
        res["global.prompt_learner.sigma"] = sum(trained[i] * (sizes[i] / sum(sizes)) for i in range(2))
        C.write_st(os.path.join(out_dir, "round.safetensors"), res,
                   {**meta, "lr": 0.01, "batch_size": 4, "local_epochs": 1, "client_sizes": str(sizes),
                    "aggregated": "prompt_learner.sigma", "aggregation": "weighted n_i/n",
                    "local": "['prompt_learner.U', 'prompt_learner.V']"})
        print("fedpgp", pos, "loss", summ["loss"])


# ------------------------------------------------------------------- FedOTP
def fedotp(step, rnd, names):
    repo = C.mirror("FEDOTP_REF", "/work/.mirror/HongxiaLee+FedOTP/repo")
    root = import_trainer(repo, "trainers/GLP_OT.py")
    patch_source(root, "trainers/GLP_OT.py", fedotp_fix)
    mod = C.load_module("trainers_glp_ot", os.path.join(root, "trainers/GLP_OT.py"))
    design = {"trainer": "GLP_OT", "vision_depth": 0, "language_depth": 0, "vision_ctx": 0, "language_ctx": 0}
    mod.load_clip_to_cpu = lambda cfg: load_clip(design)
    init, imeta = C.read_st(os.path.join(C.TESTDATA, "fedotp", "init.safetensors"))
    n_ctx, N, ot, eps, thresh, max_iter, top = 4, 2, "COT", 0.1, 1e-3, 100, 0.8

    def trainer(pos, lr):
        cfg = C.CN(TRAINER=C.CN(GLP_OT=C.CN(N_CTX=n_ctx, CTX_INIT="", CSC=False, PREC="fp32", CLASS_TOKEN_POSITION=pos,
                                            N=N, EPS=eps, OT=ot, TOP_PERCENT=top, THRESH=thresh, MAX_ITER=max_iter)),
                   INPUT=C.CN(SIZE=(32, 32)), MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
                   DATASET=C.CN(NAME="tiny"), OPTIM=C.optim_cfg(lr, MOM, WD))
        t = mod.GLP_OT(cfg, names)
        t.build_model()
        t.model.prompt_learner.load_state_dict({"ctx": init["prompt_learner.ctx"]}, strict=False)
        return t

    for pos in POSITIONS:
        out_dir = os.path.join(OUT, "fedotp-" + pos)
        t = trainer(pos, 0.001)
        m, pl = t.model, t.model.prompt_learner
        meta = {**base_meta("fedotp", pos, names, pl, n_ctx), "seed": imeta["seed"], "num_prompt": N, "avg_prompt": 1,
                "ot": ot, "eps": eps, "thresh": thresh, "max_iter": max_iter, "top_percent": top}
        C.write_st(os.path.join(out_dir, "init.safetensors"), init, {"method": "fedotp", "n_ctx": n_ctx, "num_prompt": N,
                                                                      "seed": imeta["seed"], "class_token_position": pos})
        images, labels = step["images"], step["labels"]
        tok = m.tokenized_prompts
        with torch.no_grad():
            prompts = pl()
            check_rows(prompts, len(names) * N)
            txt = m.text_encoder(prompts, tok).view(N, len(names), -1)
            img_tok = m.image_encoder(images).permute(1, 0, 2)  # [T, B, E] -> [B, T, E]
            m.eval()
            logits = m(images)
        t.set_model_mode("train")
        t.batch_idx, t.num_batches = 0, 1
        summ = t.forward_backward({"img": images, "label": labels})
        out = {"images": images, "labels": labels, "tokens": tok[:len(names)], "prompts": prompts, "image_features": img_tok,
               "text_features": txt, "logits": logits, "loss": torch.tensor([summ["loss"]]),
               "grad.prompt_learner.ctx": pl.ctx.grad.detach().clone(), "step1.prompt_learner.ctx": pl.ctx.detach().clone()}
        C.write_st(os.path.join(out_dir, "step.safetensors"), out, {**meta, "lr": 0.001, "params": "init.safetensors"})
        res, trained, sizes = {"tokens": tok[:len(names)]}, [], []
        for ci in range(2):
            ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
            tc = trainer(pos, 0.01)
            res[f"client{ci}.batch_losses"] = train_batches(tc, ims, lab)
            res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
            res[f"client{ci}.trained.prompt_learner.ctx"] = tc.model.prompt_learner.ctx.detach().clone()
            trained.append(res[f"client{ci}.trained.prompt_learner.ctx"])
            sizes.append(len(lab))
        glob = sum(trained[i][:1] * (sizes[i] / sum(sizes)) for i in range(2))
        res["global.prompt_learner.ctx"] = glob
        for ci in range(2):
            res[f"client{ci}.next.prompt_learner.ctx"] = torch.cat([glob, trained[ci][1:]], 0)
        C.write_st(os.path.join(out_dir, "round.safetensors"), res,
                   {**meta, "lr": 0.01, "batch_size": 4, "local_epochs": 1, "client_sizes": str(sizes),
                    "aggregated": "prompt_learner.ctx[:1]", "aggregation": "weighted n_i/n", "local": "prompt_learner.ctx[1:]"})
        print("fedotp", pos, "loss", summ["loss"])


# ----------------------------------------------------------------- pFedMoAP
def pfedmoap(step, rnd, names):
    repo = C.mirror("PFEDMOAP_REF", "/work/.mirror/ljaiverson+pFedMoAP/repo")
    root = import_trainer(repo, "trainers/pfedmoap.py", extra=["trainers/promptfl.py"])
    design = {"trainer": "PromptFL", "vision_depth": 0, "language_depth": 0, "vision_ctx": 0, "language_ctx": 0}
    C.load_module("trainers.promptfl", os.path.join(root, "trainers/promptfl.py"))
    mod = C.load_module("trainers_pfedmoap", os.path.join(root, "trainers/pfedmoap.py"))
    mod.load_clip_to_cpu = lambda cfg: load_clip(design)
    init, imeta = C.read_st(os.path.join(C.TESTDATA, "pfedmoap", "init.safetensors"))
    old_round, rmeta = C.read_st(os.path.join(C.TESTDATA, "pfedmoap", "round.safetensors"))
    n_ctx, K, d_g, heads, scaling, lam = 4, 3, 16, 4, 10.0, 0.5
    lr, glr = 0.002, 0.01
    gate_names = sorted(k for k in init if k.startswith("gating."))

    def trainer(pos, ctx, experts):
        cfg = C.CN(TRAINER=C.CN(PFEDMOAP=C.CN(N_CTX=n_ctx, CTX_INIT="", CSC=False, PREC="fp32", CLASS_TOKEN_POSITION=pos,
                                              NUM_EXPERTS=K, GATING_HEADS=heads, GATING_EMBED_DIM=d_g, LMBDA=lam,
                                              SCALING=scaling)),
                   INPUT=C.CN(SIZE=(32, 32)), MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
                   DATASET=C.CN(NAME="tiny", USERS=4), OPTIM=C.optim_cfg(lr, MOM, WD), OPTIMGATING=C.optim_cfg(glr, MOM, WD))
        t = mod.PFEDMOAP(cfg, names)
        t.build_model()
        t.model.prompt_learner.load_state_dict({"ctx": ctx}, strict=False)
        t.model.gating.load_state_dict({k.split(".", 1)[1]: init[k] for k in gate_names})
        t.download_nonlocal_ctx([e.clone() for e in experts])
        return t

    experts = [init["expert0.ctx"], init["expert1.ctx"]]
    for pos in POSITIONS:
        out_dir = os.path.join(OUT, "pfedmoap-" + pos)
        torch.manual_seed(int(imeta["seed"]))
        t = trainer(pos, init["prompt_learner.ctx"], experts)
        m, pl = t.model, t.model.prompt_learner
        meta = {**base_meta("pfedmoap", pos, names, pl, n_ctx), "seed": imeta["seed"], "lr": lr, "gating_lr": glr,
                "gating_momentum": MOM, "gating_weight_decay": WD, "gating_embed_dim": d_g, "gating_heads": heads,
                "scaling": scaling, "lambda": lam, "num_experts": K}
        C.write_st(os.path.join(out_dir, "init.safetensors"), init, {"method": "pfedmoap", "n_ctx": n_ctx, "seed": imeta["seed"],
                                                                      "class_token_position": pos,
                                                                      "note": "prompt_learner.ctx and gating.* are trained; expertN.ctx are the downloaded non-local prompts, in the order given to the gate"})
        images, labels = step["images"], step["labels"]
        tok = m.tokenized_prompts
        with torch.no_grad():
            prompts = pl()
            check_rows(prompts, len(names))
            txt = m.text_encoder(prompts, tok)
            m.eval()
            gate = {}
            hook = m.gating.register_forward_hook(lambda mod_, inp, outp: gate.update(output=outp[0], attention=outp[1]))
            logits = m(images)
            hook.remove()
        t.set_model_mode("train")
        t.batch_idx, t.num_batches = 0, 1
        summ = t.forward_backward({"img": images, "label": labels})
        out = {"images": images, "labels": labels, "tokens": tok, "prompts": prompts,
               "image_features": m.image_encoder(images).detach(), "text_features": txt,
               "nonlocal_text_features": torch.stack(m.nonlocal_text_features), "logits": logits,
               "gate_output": gate["output"], "gate_attention": gate["attention"],
               "loss": torch.tensor([summ["loss"]]),
               "grad.prompt_learner.ctx": pl.ctx.grad.detach().clone(), "step1.prompt_learner.ctx": pl.ctx.detach().clone()}
        for k in gate_names:
            prm = dict(m.gating.named_parameters())[k.split(".", 1)[1]]
            out["grad." + k] = prm.grad.detach().clone()
            out["step1." + k] = prm.detach().clone()
        C.write_st(os.path.join(out_dir, "step.safetensors"), out, {**meta, "params": "init.safetensors"})
        # the round: the server side (pool, selection) is the one of testdata/pfedmoap/round (it does not
        # depend on the position); client 0 trains from the global prompt with the selected experts
        sel = [int(x) for x in old_round["selected"].tolist()]
        pool = old_round["pool"]
        tc = trainer(pos, old_round["global_prompt"], [pool[i] for i in sel])
        res = {k: old_round[k] for k in ("pool", "distances_to_0", "selected", "global_prompt")}
        res["tokens"] = tok  # the promptfl/ class rows the trainer was built on
        ims, lab = rnd["client0.images"], rnd["client0.labels"]
        res["client0.batch_losses"] = train_batches(tc, ims, lab)
        res["client0.images"], res["client0.labels"] = ims, lab
        res["client0.trained.prompt_learner.ctx"] = tc.model.prompt_learner.ctx.detach().clone()
        for k in gate_names:
            res["client0.trained." + k] = dict(tc.model.gating.named_parameters())[k.split(".", 1)[1]].detach().clone()
        C.write_st(os.path.join(out_dir, "round.safetensors"), res,
                   {**meta, "batch_size": 4, "local_epochs": 1, "client": 0, "selection": "nearest",
                    "start": "prompt_learner.ctx = global_prompt; gating.* from init.safetensors"})
        print("pfedmoap", pos, "loss", summ["loss"])


def main():
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    which = sys.argv[1:] or ["fedpgp", "fedotp", "pfedmoap"]
    for w in which:
        {"fedpgp": fedpgp, "fedotp": fedotp, "pfedmoap": pfedmoap}[w](step, rnd, names)
    print("coop-positions fixtures written to", OUT, "for", ", ".join(which))


if __name__ == "__main__":
    main()
