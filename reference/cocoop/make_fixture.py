"""CoCoOp reference fixtures (testdata/cocoop) from the authors' trainers/cocoop.py
(KaiyangZhou/CoOp): their PromptLearner (meta-net bias per image), TextEncoder,
CustomCLIP and CoCoOp.build_model / forward_backward, on the tiny CLIP, float32,
CPU. Replacements: see common.py and this folder's README.md."""
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import common as C  # noqa: E402

SEED = int(os.environ.get("PFX_SEED", "41"))
N_CTX = int(os.environ.get("PFX_NCTX", "4"))
LR = float(os.environ.get("PFX_LR", "0.002"))
ROUND_LR = float(os.environ.get("PFX_ROUND_LR", "0.01"))
MOM, WD = 0.9, 5e-4
OUT = os.environ.get("PFX_OUT", os.path.join(C.TESTDATA, "cocoop"))


def trainer(mod, classnames, lr):
    cfg = C.CN(
        TRAINER=C.CN(COCOOP=C.CN(N_CTX=N_CTX, CTX_INIT="", PREC="fp32")),
        INPUT=C.CN(SIZE=(32, 32)),
        MODEL=C.CN(BACKBONE=C.CN(NAME="tiny"), INIT_WEIGHTS=""),
        OPTIM=C.optim_cfg(lr, MOM, WD),
    )
    t = mod.CoCoOp(cfg, classnames)
    t.build_model()  # their build_model: CustomCLIP, requires_grad, build_optimizer
    return t


def state(t):
    """The prompt learner's trained tensors under model-level names."""
    return {"prompt_learner." + k: v.detach().clone() for k, v in t.model.prompt_learner.named_parameters()}


def main():
    repo = C.mirror("COOP_REF", "/work/.mirror/KaiyangZhou+CoOp/repo")
    C.import_reference(repo, ["trainers/cocoop.py"])
    mod = C.load_module("trainers_cocoop", os.path.join(sys.path[0], "trainers/cocoop.py"))
    mod.load_clip_to_cpu = C.load_clip_to_cpu  # replaces the weights download
    step, rnd = C.promptfl_inputs()
    names = C.register_classes(step["tokens"])
    if N_CTX != 4:
        C.TABLES.words["X"] = [C.X_ID]
    torch.manual_seed(SEED)
    t = trainer(mod, names, LR)
    init = state(t)
    tokens = t.model.tokenized_prompts.clone()
    meta = {"method": "cocoop", "n_ctx": N_CTX, "n_cls": len(names), "class_token_position": "end",
            "ctx_init": "", "init_std": 0.02, "meta_hidden": t.model.prompt_learner.meta_net.linear1.out_features,
            "x_token_id": C.X_ID, "dot_token_id": C.DOT_ID, "sot": C.SOT, "eot": C.EOT, "logit_scale": 4.0,
            "momentum": MOM, "weight_decay": WD, "seed": SEED, "prec": "fp32"}
    C.write_st(os.path.join(OUT, "init.safetensors"), init, {**{k: meta[k] for k in ("method", "n_ctx", "seed", "init_std", "meta_hidden")}})

    # ---- step: forward intermediates with their modules, then forward_backward
    m = t.model
    images, labels = step["images"], step["labels"]
    with torch.no_grad():
        imf = m.image_encoder(images)
        imn = imf / imf.norm(dim=-1, keepdim=True)
        bias = m.prompt_learner.meta_net(imn)
        prompts = m.prompt_learner(imn)  # [B, C, 77, D]
        txt = torch.stack([m.text_encoder(p, m.tokenized_prompts) for p in prompts])
        m.eval()
        logits = m(images)  # their eval forward: logits
        m.train()
    t.batch_idx, t.num_batches = 0, 1
    summ = t.forward_backward({"img": images, "label": labels})
    out = {"images": images, "labels": labels, "tokens": tokens, "image_features": imf, "meta_bias": bias,
           "ctx_shifted": init["prompt_learner.ctx"].unsqueeze(0) + bias.unsqueeze(1),
           "text_features": txt, "logits": logits, "loss": torch.tensor([summ["loss"]])}
    for k, p in m.prompt_learner.named_parameters():
        out["grad.prompt_learner." + k] = p.grad.detach().clone()
        out["step1.prompt_learner." + k] = p.detach().clone()
    C.write_st(os.path.join(OUT, "step.safetensors"), out, {**meta, "lr": LR, "params": "init.safetensors"})

    # ---- round 0 of two clients: fresh optimizer each, FedAvg n_i/n
    res = {"tokens": tokens}
    trained, sizes = [], []
    for ci in range(2):
        ims, lab = rnd[f"client{ci}.images"], rnd[f"client{ci}.labels"]
        torch.manual_seed(SEED)
        tc = trainer(mod, names, ROUND_LR)
        tc.model.prompt_learner.load_state_dict({k[len("prompt_learner."):]: v for k, v in init.items()}, strict=False)
        tc.set_model_mode("train")
        nb = (len(lab) + 3) // 4
        tc.num_batches, losses = nb, []
        for b in range(nb):
            tc.batch_idx = b
            s = tc.forward_backward({"img": ims[4 * b:4 * b + 4], "label": lab[4 * b:4 * b + 4]})
            losses.append(s["loss"])
        res[f"client{ci}.images"], res[f"client{ci}.labels"] = ims, lab
        res[f"client{ci}.batch_losses"] = torch.tensor(losses)
        st = state(tc)
        for k, v in st.items():
            res[f"client{ci}.trained.{k}"] = v
        trained.append(copy.deepcopy(st))
        sizes.append(len(lab))
    n = sum(sizes)
    for k in init:
        res["global." + k] = sum(trained[i][k] * (sizes[i] / n) for i in range(2))
    C.write_st(os.path.join(OUT, "round.safetensors"), res,
               {**meta, "lr": ROUND_LR, "batch_size": 4, "local_epochs": 1, "client_sizes": str(sizes),
                "aggregated": ",".join(sorted(init)), "aggregation": "weighted n_i/n", "local": "[]"})
    print("cocoop fixtures written to", OUT)


if __name__ == "__main__":
    main()
