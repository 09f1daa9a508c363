"""CoOp class-token positions "middle" and "front" (testdata/coop-positions/<pos>/)
from the authors' trainers/coop.py (KaiyangZhou/CoOp): their PromptLearner
(CLASS_TOKEN_POSITION), TextEncoder, CustomCLIP and CoOp.build_model /
forward_backward, on the tiny CLIP, float32, CPU; the round is PromptFL's
(FedAvg n_i/n of the context). Replacements: common.py and this folder's README.md."""
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "61"))
N_CTX = int(os.environ.get("PFX_NCTX", "4"))
LR, ROUND_LR, MOM, WD = 0.002, 0.01, 0.9, 5e-4
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "coop-positions"))


def trainer(mod, classnames, pos, csc, lr):
    cfg = C.CN(
        TRAINER=C.CN(COOP=C.CN(N_CTX=N_CTX, CTX_INIT="", CSC=csc, PREC="fp32", CLASS_TOKEN_POSITION=pos)),
        INPUT=C.CN(SIZE=(32, 32)),
        MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
        OPTIM=C.optim_cfg(lr, MOM, WD),
    )
    t = mod.CoOp(cfg, classnames)
    t.build_model()
    return t


def run(mod, names, step, rnd, pos, csc):
    out_dir = os.path.join(OUT, pos + ("-csc" if csc else ""))
    torch.manual_seed(SEED)
    t = trainer(mod, names, pos, csc, LR)
    pl = t.model.prompt_learner
    init = {"prompt_learner.ctx": pl.ctx.detach().clone()}
    meta = {"method": "promptfl", "n_ctx": N_CTX, "n_cls": len(names), "class_token_position": pos, "csc": csc,
            "init_std": 0.02, "x_token_id": C.X_ID, "dot_token_id": C.DOT_ID, "sot": C.SOT, "eot": C.EOT,
            "logit_scale": 4.0, "momentum": MOM, "weight_decay": WD, "seed": SEED,
            "name_lens": str(list(pl.name_lens))}
    C.write_st(os.path.join(out_dir, "init.safetensors"), init, {"method": "promptfl", "n_ctx": N_CTX, "seed": SEED, "class_token_position": pos})
    m = t.model
    images, labels = step["images"], step["labels"]
    with torch.no_grad():
        prompts = pl()
        txt = m.text_encoder(prompts, m.tokenized_prompts)
        logits = m(images)
    t.batch_idx, t.num_batches = 0, 1
    summ = t.forward_backward({"img": images, "label": labels})
    out = {"images": images, "labels": labels, "tokens": m.tokenized_prompts, "prompts": prompts,
           "image_features": m.image_encoder(images).detach(), "text_features": txt, "logits": logits,
           "loss": torch.tensor([summ["loss"]]), "grad.prompt_learner.ctx": pl.ctx.grad.detach().clone(),
           "step1.prompt_learner.ctx": pl.ctx.detach().clone()}
    C.write_st(os.path.join(out_dir, "step.safetensors"), out, {**meta, "lr": LR, "params": "init.safetensors"})
    res = {"tokens": m.tokenized_prompts}
    trained, sizes = [], []
    for ci in range(2):
        ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
        torch.manual_seed(SEED)
        tc = trainer(mod, names, pos, csc, ROUND_LR)
        tc.model.prompt_learner.load_state_dict({"ctx": init["prompt_learner.ctx"]}, strict=False)
        tc.set_model_mode("train")
        nb = (len(lab) + 3) // 4
        tc.num_batches, losses = nb, []
        for b in range(nb):
            tc.batch_idx = b
            losses.append(tc.forward_backward({"img": ims[4 * b:4 * b + 4], "label": lab[4 * b:4 * b + 4]})["loss"])
        res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
        res[f"client{ci}.batch_losses"] = torch.tensor(losses)
        res[f"client{ci}.trained.prompt_learner.ctx"] = tc.model.prompt_learner.ctx.detach().clone()
        trained.append(copy.deepcopy(res[f"client{ci}.trained.prompt_learner.ctx"]))
        sizes.append(len(lab))
    res["global.prompt_learner.ctx"] = sum(trained[i] * (sizes[i] / sum(sizes)) for i in range(2))
    C.write_st(os.path.join(out_dir, "round.safetensors"), res,
               {**meta, "lr": ROUND_LR, "batch_size": 4, "local_epochs": 1, "client_sizes": str(sizes),
                "aggregated": "prompt_learner.ctx", "aggregation": "weighted n_i/n", "local": "[]"})


def main():
    repo = C.mirror("COOP_REF", "/work/.mirror/KaiyangZhou+CoOp/repo")
    C.import_reference(repo, ["trainers/coop.py"])
    mod = C.load_module("trainers_coop", os.path.join(sys.path[0], "trainers/coop.py"))
    mod.load_clip_to_cpu = C.load_clip_to_cpu
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    for pos in ("middle", "front"):
        run(mod, names, step, rnd, pos, False)
    run(mod, names, step, rnd, "middle", True)  # class-specific contexts
    print("coop-positions fixtures written to", OUT)


if __name__ == "__main__":
    main()
