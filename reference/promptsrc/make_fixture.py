"""PromptSRC reference fixtures on the tiny CLIP, made by running the authors' code.

Runs muzairkhattak/PromptSRC (trainers/promptsrc.py: VLPromptLearner, TextEncoder, CustomCLIP,
the PromptSRC trainer's build_model (parameter selection, GPA weights) and its non-amp
forward_backward with the end-of-epoch Gaussian prompt aggregation; clip/model.py: CLIP,
VisionTransformer and ResidualAttentionBlock_IVLP with the deep prompts, build_model) in
float32 on CPU, with Dassl's real TrainerBase / build_optimizer / build_lr_scheduler
(reference/common/common.py). What cannot run here is replaced, each replacement marked
REPLACED below and listed in reference/promptsrc/README.md.

Usage: /usr/bin/python3 make_fixture.py [--out testdata/promptsrc]
(PROMPTSRC_REF: the git mirror of muzairkhattak/PromptSRC; DASSL_REF: KaiyangZhou/Dassl.pytorch.)
"""
import argparse
import os
import sys
import tempfile
import types

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

N_CTX_TEXT, N_CTX_VISION = 4, 4          # the authors' configs
DEPTH_TEXT, DEPTH_VISION = 3, 2          # of the tiny CLIP's 4 blocks (theirs: 9 of 12); unequal
TEXT_W, IMAGE_W = 25.0, 10.0             # the authors' TEXT_LOSS_WEIGHT, IMAGE_LOSS_WEIGHT
GPA_MEAN, GPA_STD, GPA_EPOCHS = 2.0, 1.0, 3
LR, ROUND_LR, MOM, WD = 0.002, 0.01, 0.9, 5e-4
SEED = 29
# REPLACED: IMAGENET_TEMPLATES (60 templates) by three of them, their words given ids that fit
# the tiny vocabulary: "a", "of", "the" their real BPE ids, the others synthetic.
TEMPLATES = ["a photo of a {}.", "a bad photo of the {}.", "a rendering of a {}."]
WORDS = {"a": [320], "photo": [125], "of": [539], "the": [518], "bad": [421], "rendering": [730]}


def patch_sources(repo, dst):
    """Copies the authors' files, removing the fp16 casts and the CUDA moves (REPLACED)."""
    edits = {
        "clip/model.py": [
            # ResidualAttentionBlock_IVLP: deep prompts of vision and text blocks
            (".permute(1, 0, 2).half()", ".permute(1, 0, 2)", 4),  # 2 IVLP, 2 MaPLe (unused)
            # VisionTransformer: the shallow visual prompt
            ("visual_ctx = self.VPT.expand(x.shape[0], -1, -1).half()",
             "visual_ctx = self.VPT.expand(x.shape[0], -1, -1)", 1),
        ],
        "trainers/promptsrc.py": [
            # fp32 branch: the zero-shot logits multiply float32 features by a float16 copy
            # of the frozen text features (a dtype error outside fp16); the CUDA moves.
            ("fixed_embeddings.half().cuda().t()", "fixed_embeddings.t()", 1),
            ("load_clip_to_cpu(cfg, True).float().cuda()", "load_clip_to_cpu(cfg, True).float()", 1),
            ("x_tokenized.cuda()", "x_tokenized", 1),
            ("zero_shot_features.cuda()", "zero_shot_features", 1),
            ("zs_clip_text_embeddings.cuda()", "zs_clip_text_embeddings", 1),
            ("zs_image_embedd.cuda()", "zs_image_embedd", 1),
        ],
        "trainers/imagenet_templates.py": [],
    }
    for rel, subs in edits.items():
        src = C.git_show(repo, rel)
        for old, new, count in subs:
            got = src.count(old)
            if got != count:
                raise SystemExit(f"{rel}: expected {count} occurrence(s) of {old!r}, found {got}")
            src = src.replace(old, new)
        out = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(src)
    open(os.path.join(dst, "trainers", "__init__.py"), "w").close()


def install(repo):
    """Imports their clip/model.py and trainers/promptsrc.py with the stand-ins of common.py
    (REPLACED: clip.tokenize by the token table, SimpleTokenizer, Dassl's data side)."""
    root = tempfile.mkdtemp(prefix="promptsrc-ref-")
    patch_sources(repo, root)
    clip_pkg = types.ModuleType("clip")
    clip_pkg.__path__ = [os.path.join(root, "clip")]
    sys.modules["clip"] = clip_pkg
    model = C.load_module("clip.model", os.path.join(root, "clip", "model.py"))
    cl = types.ModuleType("clip.clip")
    cl.build_model = model.build_model
    cl.tokenize = C.TABLES.tokenize
    cl._MODELS = {"tiny": "REPLACED: the tiny CLIP of testdata/clip-tiny"}
    sys.modules["clip.clip"] = cl
    clip_pkg.clip = cl
    tok = types.ModuleType("clip.simple_tokenizer")

    class SimpleTokenizer:
        def encode(self, text):
            return C.TABLES.ids(text)

    tok.SimpleTokenizer = SimpleTokenizer
    sys.modules["clip.simple_tokenizer"] = tok
    C.install_dassl()
    sys.path.insert(0, root)
    import trainers.promptsrc as ps  # noqa: E402
    ps.IMAGENET_TEMPLATES = TEMPLATES
    weights, _ = C.read_st(os.path.join(C.TESTDATA, "clip-tiny", "openai.safetensors"))

    def load_clip_to_cpu(cfg, zero_shot_model=False):
        """REPLACED: their load_clip_to_cpu downloads the OpenAI weights. The same
        design_details through their build_model, on the tiny CLIP's float32 weights,
        without convert_weights (fp16)."""
        p = cfg.TRAINER.PROMPTSRC
        if not zero_shot_model:
            design = {"trainer": "IVLP", "vision_depth": p.PROMPT_DEPTH_VISION,
                      "language_depth": p.PROMPT_DEPTH_TEXT, "vision_ctx": p.N_CTX_VISION,
                      "language_ctx": p.N_CTX_TEXT}
        else:
            design = {"trainer": "IVLP", "vision_depth": 0, "language_depth": 0,
                      "vision_ctx": 0, "language_ctx": 0}
        saved = model.convert_weights
        model.convert_weights = lambda m: None
        sd = {k: v.clone() for k, v in weights.items()}
        sd["logit_scale"] = sd["logit_scale"].reshape(())
        m = model.build_model(sd, design)  # strict load fails on the VPT keys, then strict=False
        model.convert_weights = saved
        got = m.state_dict()
        for k, v in sd.items():
            if not torch.equal(got[k], v):
                raise SystemExit(f"weight {k} differs after loading")
        return m

    ps.load_clip_to_cpu = load_clip_to_cpu
    return ps


class Recorder:
    """Stands in for torch.nn.functional inside their module and records what their
    forward_backward computes (cross_entropy in CustomCLIP, l1_loss, kl_div)."""

    def __init__(self, F):
        self.F = F
        self.log = []

    def __getattr__(self, name):
        fn = getattr(self.F, name)
        if name not in ("l1_loss", "kl_div", "cross_entropy"):
            return fn

        def wrapped(*a, **k):
            out = fn(*a, **k)
            self.log.append((name, out.detach().clone()))
            return out
        return wrapped


def cfg_for(lr, max_epoch):
    return C.CN(
        TRAINER=C.CN(PROMPTSRC=C.CN(
            N_CTX_VISION=N_CTX_VISION, N_CTX_TEXT=N_CTX_TEXT, CTX_INIT="", PREC="fp32",
            PROMPT_DEPTH_VISION=DEPTH_VISION, PROMPT_DEPTH_TEXT=DEPTH_TEXT,
            TEXT_LOSS_WEIGHT=TEXT_W, IMAGE_LOSS_WEIGHT=IMAGE_W, GPA_MEAN=GPA_MEAN, GPA_STD=GPA_STD)),
        INPUT=C.CN(SIZE=(32, 32)),
        MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
        OPTIM=C.optim_cfg(lr, MOM, WD, max_epoch=max_epoch),
    )


def trainer(ps, classnames, lr, max_epoch, init=None):
    torch.manual_seed(SEED)
    t = ps.PromptSRC(cfg_for(lr, max_epoch), classnames)
    t.build_model()
    if init is not None:
        t.model.load_state_dict({k: v.clone() for k, v in init.items()}, strict=False)
    t.set_model_mode("train")
    return t


def learned(model):
    return {k: v for k, v in model.named_parameters() if v.requires_grad}


def snap(model, prefix=""):
    return {prefix + k: v.detach().clone() for k, v in learned(model).items()}


def fb(t, rec, images, labels, batch_idx, num_batches):
    t.batch_idx, t.num_batches = batch_idx, num_batches
    rec.log.clear()
    out = t.forward_backward({"img": images, "label": labels})
    return out["loss"]


def features(t, images):
    """The prompted and frozen features the forward computes (their modules, no grad)."""
    m = t.model
    with torch.no_grad():
        tf = m.text_encoder(m.prompt_learner(), m.tokenized_prompts)
        imf = m.image_encoder(images)
        zs = m.prompt_learner.ZS_image_encoder(images)
    return tf, imf, zs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(C.TESTDATA, "promptsrc"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    repo = C.mirror("PROMPTSRC_REF", "/work/.mirror/muzairkhattak+PromptSRC/repo")
    step_in, rnd_in = C.promptfl_inputs()
    tokens = step_in["tokens"]
    classnames = C.register_classes(tokens)
    C.TABLES.words.update(WORDS)
    ps = install(repo)
    rec = Recorder(ps.F)
    ps.F = rec
    template_tokens = torch.stack([C.TABLES.tokenize(tp.format(c))[0] for tp in TEMPLATES for c in classnames])
    meta = {"method": "promptsrc", "n_ctx_text": N_CTX_TEXT, "n_ctx_vision": N_CTX_VISION,
            "prompt_depth_text": DEPTH_TEXT, "prompt_depth_vision": DEPTH_VISION,
            "text_loss_weight": TEXT_W, "image_loss_weight": IMAGE_W, "n_cls": len(classnames),
            "templates": "|".join(TEMPLATES), "n_templates": len(TEMPLATES),
            "logit_scale": 4.0, "momentum": MOM, "weight_decay": WD, "init_std": 0.02, "seed": SEED,
            "prec": "fp32", "ctx_init": "", "class_token_position": "end", "x_token_id": C.X_ID,
            "dot_token_id": C.DOT_ID, "sot": C.SOT, "eot": C.EOT, "lr_scheduler": "constant",
            "loss": "CE + text_w*L1(t,zt) + image_w*L1(i,zi) + KL_sum(zs||student)/(B*C)"}
    os.makedirs(a.out, exist_ok=True)

    # ---------------------------------------------------------------- step
    t = trainer(ps, classnames, LR, 1)
    init = snap(t.model)
    C.write_st(os.path.join(a.out, "init.safetensors"), init, dict(meta, params="init"))
    images, labels = step_in["images"], step_in["labels"]
    pl = t.model.prompt_learner
    tf, imf, zs = features(t, images)
    fixed = pl.fixed_embeddings.detach().clone()
    with torch.no_grad():
        per_template = torch.stack([ps.load_clip_to_cpu(t.cfg, True).float().encode_text(
            template_tokens[i * len(classnames):(i + 1) * len(classnames)]) for i in range(len(TEMPLATES))])
    if not torch.allclose(per_template.mean(0), fixed, atol=1e-6):
        raise SystemExit("fixed_embeddings: not the template mean")
    loss = fb(t, rec, images, labels, 0, 2)  # batch 0 of 2: no GPA in this step
    names = [n for n, _ in rec.log]
    if names != ["cross_entropy", "l1_loss", "l1_loss", "kl_div"]:
        raise SystemExit(f"unexpected loss calls {names}")
    ce, l1t, l1i, kl = [v for _, v in rec.log]
    total = float(ce + TEXT_W * l1t + IMAGE_W * l1i + kl / (len(labels) * len(classnames)))
    if abs(total - loss) > 1e-5 * abs(loss):
        raise SystemExit(f"their loss {loss} is not the sum of the recorded terms {total}")
    grads = {"grad." + k: v.grad.detach().clone() for k, v in learned(t.model).items()}
    tfn = tf / tf.norm(dim=-1, keepdim=True)
    ifn = imf / imf.norm(dim=-1, keepdim=True)
    zsn = zs / zs.norm(dim=-1, keepdim=True)
    fxn = fixed / fixed.norm(dim=-1, keepdim=True)
    scale = t.model.logit_scale.exp().detach()
    step = {"images": images, "labels": labels, "tokens": tokens, "template_tokens": template_tokens,
            "text_features": tf, "image_features": imf, "zs_image_features": zs,
            "zs_text_features": fixed, "zs_text_features_per_template": per_template,
            "logits": scale * ifn @ tfn.t(), "zs_logits": scale * zsn @ fxn.t(),
            "loss_ce": ce.reshape(1), "l1_text": l1t.reshape(1), "l1_image": l1i.reshape(1),
            "kl_sum": kl.reshape(1), "loss_scl_logits": (kl / (len(labels) * len(classnames))).reshape(1),
            "loss": torch.tensor([loss])}
    step.update(grads)
    step.update(snap(t.model, "step1."))
    C.write_st(os.path.join(a.out, "step.safetensors"), step,
               dict(meta, lr=LR, params="init.safetensors",
                    loss_parts="l1_text, l1_image: F.l1_loss means before their weights; "
                               "kl_sum: F.kl_div(log p, log p_zs, reduction sum, log_target) = sum p_zs (log p_zs - log p); "
                               "loss_scl_logits = kl_sum / (B*C); "
                               "loss = loss_ce + text_w*l1_text + image_w*l1_image + loss_scl_logits"))

    # ------------------------------------------- GPA: 3 epochs of 2 batches
    t = trainer(ps, classnames, ROUND_LR, GPA_EPOCHS, init)
    weighted = []
    inner = t.state_dict_weighting

    def recording(main_dict, weightage, prompt_only=False):
        # records what their end-of-epoch GPA weights (the model's state after the epoch)
        weighted.append(({k: main_dict[k].clone() for k in learned(t.model)}, float(weightage)))
        return inner(main_dict, weightage, prompt_only)

    t.state_dict_weighting = recording
    ims, lbs = rnd_in["client0.images"], rnd_in["client0.labels"]
    gpa = {"images": ims, "labels": lbs, "tokens": tokens, "template_tokens": template_tokens,
           "gpa_weights": torch.tensor(t.gauss)}
    losses = []
    nb = len(ims) // 4
    for e in range(GPA_EPOCHS):
        t.epoch = e
        t.set_model_mode("train")  # Dassl's run_epoch
        for b in range(nb):
            losses.append(fb(t, rec, ims[4 * b:4 * b + 4], lbs[4 * b:4 * b + 4], b, nb))
    if len(weighted) != GPA_EPOCHS:
        raise SystemExit(f"GPA ran {len(weighted)} times, want {GPA_EPOCHS}")
    for e, (sd, w) in enumerate(weighted):
        if abs(w - t.gauss[e]) > 0:
            raise SystemExit("GPA weight order")
        for k, v in sd.items():
            gpa[f"epoch{e}.{k}"] = v
    gpa["batch_losses"] = torch.tensor(losses)
    gpa.update(snap(t.model, "gpa."))
    C.write_st(os.path.join(a.out, "gpa.safetensors"), gpa,
               dict(meta, lr=ROUND_LR, batch_size=4, max_epoch=GPA_EPOCHS, gpa_mean=GPA_MEAN,
                    gpa_std=GPA_STD, params="init.safetensors",
                    gpa="epoch<e>.<p>: the state after epoch e (training continues from it); "
                        "gpa.<p> = sum_e gpa_weights[e]*epoch<e>.<p>, loaded after the last epoch"))

    # --------------------------------------------- round: two clients, FedAvg
    rnd = {"tokens": tokens, "template_tokens": template_tokens}
    trained, sizes = [], []
    for c in range(2):
        t = trainer(ps, classnames, ROUND_LR, 1, init)
        ims, lbs = rnd_in[f"client{c}.images"], rnd_in[f"client{c}.labels"]
        rnd[f"client{c}.images"], rnd[f"client{c}.labels"] = ims, lbs
        nb = len(ims) // 4
        losses = [fb(t, rec, ims[4 * b:4 * b + 4], lbs[4 * b:4 * b + 4], b, nb) for b in range(nb)]
        rnd[f"client{c}.batch_losses"] = torch.tensor(losses)
        tr = snap(t.model)
        trained.append(tr)
        sizes.append(len(ims))
        for k, v in tr.items():
            rnd[f"client{c}.trained.{k}"] = v
    n = sum(sizes)
    # FedAvg with weights n_i / n (FLiP's aggregate over its prompt learner's state: there the
    # prompt learner holds every learned prompt, here the deep prompts live in the encoders).
    avg = {k: sum(tr[k] * (ni / n) for tr, ni in zip(trained, sizes)) for k in trained[0]}
    for k, v in avg.items():
        rnd["global." + k] = v
    # FLiP's server-side GPA after round r = 0 (PromptSRCCLIP.gauss_avg, restated): weights
    # gauss(t), t = 0..R, normalised; the global prompts become the running weighted sum.
    R = 2
    g = np.array([np.exp(-0.5 * ((x - 1.0) / 1.0) ** 2) / (1.0 * np.sqrt(2 * np.pi)) for x in range(0, R + 1)])
    g = g / g.sum()
    for k, v in avg.items():
        rnd["global_gpa." + k] = v * float(g[0])
    rnd["flip_gpa_weights"] = torch.tensor(g)
    C.write_st(os.path.join(a.out, "round.safetensors"), rnd,
               dict(meta, lr=ROUND_LR, batch_size=4, local_epochs=1, client_sizes=sizes,
                    aggregated=",".join(sorted(avg)), local="[]",
                    flip_gpa="global_gpa = w[0]*global, w = gauss(t; mean 1, std 1), t=0..R=2, normalised "
                             "(FLiP hard-codes mean 15, std 1 over its global_rounds)",
                    flip_gpa_rounds=R, flip_gpa_mean=1.0, flip_gpa_std=1.0))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
