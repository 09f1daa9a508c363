#!/usr/bin/env python3
"""Reference harness: the authors' FedPHA training step and evaluation, timed.

Imports model/FedPHA.py (FedPHA, PromptLearner with compute_null_space,
TextEncoder), clip/model_fedotp.py (the CLIP their loader builds) and the
client, federated/client_fedpha.py (Client_FedPHA.forward_backward with
ClientBase.parse_batch and TrainerBase.model_backward_and_update), from a
checkout of the PMFLT toolbox, github.com/Yuqin-G/PMFLT (--repo; the
official CYFang6/FedPHA repository ships no trainer source). Times, on CPU
in float32, at the setting of `pfedmma bench train --method fedpha`: ViT-B/16
shapes with random weights, 24 classes, batch 32 of 224x224 images, PMFLT's
fedpha.yaml (n_ctx 16, one prompt, ratio 0.8, alpha 1, generic context,
init std 0.02, class token at the end) and PMFLT's optimizer (their
build_optimizer: SGD lr 0.003 momentum 0.9 wd 1e-5) on the prompt learner
(both contexts).

A training step is the authors' Client_FedPHA.forward_backward, called on
a client object: the forward (the SVD of the global context and the
projector, the frozen image encoder, the text encoder over the 24 prompts
three times — local, global and projected local contexts), the two
cross-entropies, the pull and push terms, then their
model_backward_and_update (zero_grad, the finite-loss check, backward
through the SVD, SGD step). An evaluation batch is FedPHA.forward in eval
mode under no_grad (the local prompts only: one text pass, as the personal
model scores).

What is not theirs: the client is made without its constructor (no data
managers) and given the model, optimizer and device the server's
distribute would give it; the optional packages a step never touches
(sklearn, swanlab, PMFLT's dataloader package) are stubs, einops.repeat a
stand-in when einops is missing (refcommon/fedtpg_ref), .cuda()/.to('cuda')
stay on the CPU, and clip.tokenize is the harness's.

Usage: /usr/bin/python3 fedpha_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method fedpha --reference FILE` reads.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fedtpg"))
from fedtpg_ref import einops_stub  # noqa: E402


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)

    rc.cuda_is_cpu()
    einops_stub(torch)
    rc.stub_packages("sklearn", "swanlab", "dataloader")
    model_py = rc.load_clip(args.repo)
    sys.path.insert(0, args.repo)  # FedPHA.py imports model.prompt_net, clip.model_fedotp
    fedpha = rc.load("model.FedPHA", f"{args.repo}/model/FedPHA.py")
    client_mod = rc.load("federated.client_fedpha", f"{args.repo}/federated/client_fedpha.py")
    utils = sys.modules["federated.utils"]
    del model_py  # FedPHA's CLIP is clip/model_fedotp.py's
    otp = sys.modules["clip.model_fedotp"]
    # load_clip_to_cpu's design_details (trainer GL_SVDMSE: the plain ViT)
    clip_model = rc.vit_b16(otp, args.image, {"trainer": "GL_SVDMSE", "vision_depth": 0, "language_depth": 0,
                                             "vision_ctx": 0, "language_ctx": 0})
    n_ctx, ratio, alpha = 16, 0.8, 1.0
    cfg = rc.ns(TRAINER={"GL_SVDMSE": {"N_CTX": n_ctx, "CSC": False, "CTX_INIT": False, "PREC": "fp32",
                                       "CLASS_TOKEN_POSITION": "end", "N": 1, "lambda_orthogonal": 1,
                                       "alpha": alpha, "ratio": ratio}},
                OPTIM={"NAME": "sgd", "LR": 0.003, "WEIGHT_DECAY": 1e-5, "MOMENTUM": 0.9})
    classnames = [f"class_{i}" for i in range(args.classes)]
    model = fedpha.FedPHA(cfg, classnames, clip_model, device="cpu")  # Server_FedPHA.build_model
    rc.check_prompts("fedpha_ref", model.tokenized_prompts, args.classes)
    model.lambda_orthogonal = 1
    model.alpha = alpha
    for name, p in model.named_parameters():  # the server's rule
        if "prompt_learner" not in name:
            p.requires_grad_(False)

    # Server_FedPHA.distribute(initial=True), without the constructor's data managers
    client = object.__new__(client_mod.Client_FedPHA)
    client._models, client._optims, client._scheds = {}, {}, {}
    client.device = "cpu"
    client.model = model
    optim = utils.build_optimizer(model.prompt_learner, cfg.OPTIM)
    client._models["prompt_learner"] = model.prompt_learner
    client._optims["prompt_learner"] = optim
    client._scheds["prompt_learner"] = None

    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes
    batch = {"img": images, "label": labels, "cname": [classnames[i] for i in labels.tolist()]}

    def train_step():  # Client_FedPHA.train's loop body (set_model_mode("train"))
        model.train()
        loss, _ = client.forward_backward(batch, "bench", classnames)
        loss.item()

    def eval_step():
        model.eval()
        with torch.no_grad():
            model(images)

    rc.run(args, torch, ob, "fedpha", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad],
           {"n_ctx": n_ctx, "ratio": ratio, "alpha": alpha, "text_passes_train": 3})


if __name__ == "__main__":
    main()
