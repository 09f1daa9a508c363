"""KgCoOp reference fixtures (testdata/kgcoop) from the authors' trainers/kgcoop.py
(htyao89/KgCoOp): their PromptLearner (context from "a photo of a", the
hand-crafted template's text features), TextEncoder, CustomCLIP (logits and
score = 1 − mean cos) and KgCoOp.build_model / forward_backward (CE + w·score),
on the tiny CLIP, float32, CPU. Replacements: common.py and this folder's README.md."""
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "51"))
W_KG = float(os.environ.get("PFX_W", "8.0"))
LR = float(os.environ.get("PFX_LR", "0.002"))
ROUND_LR = float(os.environ.get("PFX_ROUND_LR", "0.01"))
MOM, WD = 0.9, 5e-4
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "kgcoop"))
# "a photo of a": "a" and "of" are their real BPE ids; "photo" (1125) does not
# fit the tiny vocabulary of 1000 and gets the synthetic id 125.
WORDS = {"a": [320], "photo": [125], "of": [539]}


def trainer(mod, classnames, lr):
    cfg = C.CN(
        TRAINER=C.CN(COOP=C.CN(N_CTX=4, CTX_INIT=True, CSC=False, PREC="fp32", CLASS_TOKEN_POSITION="end", W=W_KG),
                     COCOOP=C.CN(PREC="fp32")),
        DATASET=C.CN(NAME="ImageNet"),
        INPUT=C.CN(SIZE=(32, 32)),
        MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
        OPTIM=C.optim_cfg(lr, MOM, WD),
    )
    t = mod.KgCoOp(cfg, classnames)
    t.build_model()
    return t


def write_step(t, step, tokens, template_tokens, meta, name, params):
    """One step of their forward_backward with every forward intermediate."""
    m, pl = t.model, t.model.prompt_learner
    images, labels = step["images"], step["labels"]
    with torch.no_grad():
        imf = m.image_encoder(images)
        txt = m.text_encoder(pl(), m.tokenized_prompts)
        logits, score = m(images)
        tn = txt / txt.norm(dim=-1, keepdim=True)
        cos = torch.nn.CosineSimilarity(dim=1, eps=1e-07)(tn, m.ori_embedding / m.ori_embedding.norm(dim=-1, keepdim=True))
        ce = torch.nn.functional.cross_entropy(logits, labels)
    t.batch_idx, t.num_batches = 0, 1
    summ = t.forward_backward({"img": images, "label": labels})
    out = {"images": images, "labels": labels, "tokens": tokens, "template_tokens": template_tokens,
           "image_features": imf, "text_features": txt, "template_features": m.ori_embedding, "cos": cos,
           "score": score.reshape(1), "loss_ce": ce.reshape(1), "logits": logits, "loss": torch.tensor([summ["loss"]]),
           "grad.prompt_learner.ctx": pl.ctx.grad.detach().clone(), "step1.prompt_learner.ctx": pl.ctx.detach().clone()}
    C.write_st(os.path.join(OUT, name), out, {**meta, "lr": LR, "params": params})



def main():
    repo = C.mirror("KGCOOP_REF", "/work/.mirror/htyao89+KgCoOp/repo")
    C.import_reference(repo, ["KgCoOp/trainers/kgcoop.py"], clip_dir="KgCoOp/clip")
    # CUDA: their PromptLearner moves its second CLIP and the template tokens
    # to the GPU; here .cuda() is the identity.
    torch.nn.Module.cuda = lambda self, *a, **k: self
    torch.Tensor.cuda = lambda self, *a, **k: self
    mod = C.load_module("trainers_kgcoop", os.path.join(sys.path[0], "KgCoOp/trainers/kgcoop.py"))
    mod.load_clip_to_cpu = C.load_clip_to_cpu
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    C.TABLES.words.update(WORDS)
    torch.manual_seed(SEED)
    t = trainer(mod, names, LR)
    pl = t.model.prompt_learner
    init = {"prompt_learner.ctx": pl.ctx.detach().clone()}
    tokens = t.model.tokenized_prompts.clone()
    template_tokens = torch.cat([C.TABLES.tokenize("a photo of a {}.".format(n)) for n in names])
    meta = {"method": "kgcoop", "n_ctx": pl.n_ctx, "n_cls": len(names), "class_token_position": "end",
            "ctx_init": "a photo of a", "template": "a photo of a {}.", "w": W_KG, "cos_eps": 1e-7,
            "sot": C.SOT, "eot": C.EOT, "dot_token_id": C.DOT_ID, "logit_scale": 4.0,
            "momentum": MOM, "weight_decay": WD, "seed": SEED, "prec": "fp32"}
    C.write_st(os.path.join(OUT, "init.safetensors"), init, {"method": "kgcoop", "n_ctx": pl.n_ctx, "ctx_init": "a photo of a", "seed": SEED})

    write_step(t, step, tokens, template_tokens, meta, "step.safetensors", "init.safetensors")
    # At init the context is the template's own words, so cos = 1 and the
    # pull term has no gradient: step_rand starts from init + N(0, 0.02²).
    g = torch.Generator().manual_seed(SEED + 1)
    rand = {"prompt_learner.ctx": init["prompt_learner.ctx"] + 0.02 * torch.randn(init["prompt_learner.ctx"].shape, generator=g)}
    C.write_st(os.path.join(OUT, "init_rand.safetensors"), rand, {"method": "kgcoop", "n_ctx": pl.n_ctx, "seed": SEED + 1, "init": "init + 0.02·N"})
    torch.manual_seed(SEED)
    t2 = trainer(mod, names, LR)
    t2.model.prompt_learner.load_state_dict({"ctx": rand["prompt_learner.ctx"]}, strict=False)
    write_step(t2, step, tokens, template_tokens, meta, "step_rand.safetensors", "init_rand.safetensors")

    # the round starts from init_rand too, so that every batch's pull term
    # has a gradient
    res = {"tokens": tokens, "template_tokens": template_tokens}
    trained, sizes = [], []
    for ci in range(2):
        ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
        torch.manual_seed(SEED)
        tc = trainer(mod, names, ROUND_LR)
        tc.model.prompt_learner.load_state_dict({"ctx": rand["prompt_learner.ctx"]}, strict=False)
        tc.set_model_mode("train")
        nb = (len(lab) + 3) // 4
        tc.num_batches, losses = nb, []
        for b in range(nb):
            tc.batch_idx = b
            s = tc.forward_backward({"img": ims[4 * b:4 * b + 4], "label": lab[4 * b:4 * b + 4]})
            losses.append(s["loss"])
        res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
        res[f"client{ci}.batch_losses"] = torch.tensor(losses)
        st = {"prompt_learner.ctx": tc.model.prompt_learner.ctx.detach().clone()}
        res[f"client{ci}.trained.prompt_learner.ctx"] = st["prompt_learner.ctx"]
        trained.append(copy.deepcopy(st))
        sizes.append(len(lab))
    n = sum(sizes)
    res["global.prompt_learner.ctx"] = sum(trained[i]["prompt_learner.ctx"] * (sizes[i] / n) for i in range(2))
    C.write_st(os.path.join(OUT, "round.safetensors"), res,
               {**meta, "lr": ROUND_LR, "batch_size": 4, "local_epochs": 1, "client_sizes": str(sizes),
                "params": "init_rand.safetensors", "aggregated": "prompt_learner.ctx", "aggregation": "weighted n_i/n", "local": "[]"})
    print("kgcoop fixtures written to", OUT)


if __name__ == "__main__":
    main()
