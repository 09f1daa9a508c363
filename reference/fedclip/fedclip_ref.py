#!/usr/bin/env python3
"""Reference harness: the authors' FedCLIP training step and evaluation, timed.

Imports model/FedCLIP.py (FedCLIP: the attention adapter img_adap on CLIP's
image feature), clip/model.py and the client, federated/client_fedclip.py
(Client_FedCLIP.build_model, forward_backward, with TrainerBase's
model_backward_and_update), from a checkout of the PMFLT toolbox,
github.com/Yuqin-G/PMFLT (--repo). Times, on CPU in float32, at the
setting of `pfedmma bench train --method fedclip`: ViT-B/16 shapes with
random weights (feature_dim 512, their ViT-B/16 branch), 24 classes, batch
32 of 224x224 images, the prompt "a photo of a {class}.", PMFLT's optimizer
(their build_optimizer: SGD lr 0.003 momentum 0.9 wd 1e-5) on the adapter.

A training step is the authors' Client_FedCLIP.forward_backward, then
model_backward_and_update, as their Client_FedCLIP.train runs them: the
forward (the text encoder under no_grad over the batch's 32 class-name
prompts, re-tokenised and re-encoded every step; the frozen image encoder;
the adapter and its product), the symmetric image/text cross-entropy over
the batch, zero_grad, the finite-loss check, backward (the adapter only),
SGD step. An evaluation batch is their local_test's forward: FedCLIP.forward
under no_grad over the 24 class prompts (re-encoded every batch).

What is not theirs: clip.load returns the random-weight float32 ViT-B/16
(no download); Client_FedCLIP.__init__ cannot run (it passes an undefined
clip_model), so the client is made without its constructor and its own
build_model is called with the config; Client_FedCLIP lacks parse_batch
(the fixture's fix: ClientBase's is bound); and forward_backward's two
in-place normalisations after the loss (`image_features /= ...`,
`text_features /= ...`, for the accuracy only) are made out-of-place in the
source before compiling, because as shipped backward fails on them.
.cuda()/.to('cuda') stay on the CPU (their encode_image/encode_text move
the whole CLIP to the device and back to the CPU in every call: on a GPU
that is two transfers of CLIP's weights per call, here a no-op walk), and
the optional packages a step never touches (sklearn, swanlab, PMFLT's
dataloader package) are stubs.

Usage: /usr/bin/python3 fedclip_ref.py --repo CHECKOUT [--steps 10] [--image 224]
Prints the JSON that `pfedmma bench train --method fedclip --reference FILE` reads.
"""
import importlib.util
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))  # refcommon.py
import refcommon as rc  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fedtpg"))
from fedtpg_ref import einops_stub  # noqa: E402

# forward_backward's in-place normalisations after the loss (accuracy
# only), as shipped and as run here.
INPLACE = ("        image_features /= image_features.norm(dim=-1, keepdim=True)\n"
           "        text_features /= text_features.norm(dim=-1, keepdim=True)\n"
           "        similarity = (100.0 * image_features @ text_features.T).softmax(dim=-1)\n\n"
           "        # return loss")
OUT_OF_PLACE = ("        image_features = image_features / image_features.norm(dim=-1, keepdim=True)\n"
                "        text_features = text_features / text_features.norm(dim=-1, keepdim=True)\n"
                "        similarity = (100.0 * image_features @ text_features.T).softmax(dim=-1)\n\n"
                "        # return loss")


def load_client(repo):
    """federated/client_fedclip.py with forward_backward's in-place lines
    made out-of-place (only there: the count is checked)."""
    path = f"{repo}/federated/client_fedclip.py"
    src = open(path).read()
    if src.count(INPLACE) != 1:
        raise SystemExit(f"fedclip_ref: {path}: forward_backward's in-place normalisation not found "
                         "once; the checkout differs from the one this harness knows")
    src = src.replace(INPLACE, OUT_OF_PLACE)
    spec = importlib.util.spec_from_loader("federated.client_fedclip", loader=None, origin=path)
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = path
    sys.modules[spec.name] = mod
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def main():
    args = rc.parser(__doc__.splitlines()[0]).parse_args()
    torch, ob = rc.setup(args)

    rc.cuda_is_cpu()
    einops_stub(torch)
    rc.stub_packages("sklearn", "swanlab", "dataloader")
    model_py = rc.load_clip(args.repo)
    clip_model = rc.vit_b16(model_py, args.image)
    sys.modules["clip.clip"].load = lambda name, device="cpu", **k: (clip_model, None)
    sys.path.insert(0, args.repo)  # FedCLIP.py imports model.prompt_net; the client federated.*
    rc.load("model.FedCLIP", f"{args.repo}/model/FedCLIP.py")
    base = rc.load("federated.client_base", f"{args.repo}/federated/client_base.py")
    client_mod = load_client(args.repo)
    client_mod.Client_FedCLIP.parse_batch = base.ClientBase.parse_batch

    cfg = rc.ns(MODEL={"BACKBONE": "ViT-B/16", "NAME": "fedclip", "N_CTX": 16, "D_CTX": 1, "DEPTH": 0},
                TRAIN={"W": 0.0},
                OPTIM={"NAME": "sgd", "LR": 0.003, "WEIGHT_DECAY": 1e-5, "MOMENTUM": 0.9,
                       "LR_SCHEDULER": "cosine", "STEPSIZE": (-1,), "GAMMA": 0.1, "MAX_EPOCH": 1000,
                       "WARMUP_EPOCH": -1, "WARMUP_TYPE": "constant", "WARMUP_CONS_LR": 1e-5,
                       "WARMUP_MIN_LR": 1e-5, "WARMUP_RECOUNT": True})
    client = object.__new__(client_mod.Client_FedCLIP)
    client._models, client._optims, client._scheds = {}, {}, {}
    client.device = torch.device("cpu")
    client.cfg, client.client_id = cfg, 0
    client.build_model(None)  # their build_model (the clip_model argument is unused)
    model = client.model
    if model.clip.visual.output_dim != 512:
        raise SystemExit("fedclip_ref: the CLIP is not ViT-B/16 (512-wide features)")

    classnames = [f"class {i}" for i in range(args.classes)]
    rows = torch.cat([rc.tokenize(f"{model.prompt_prefix} {c}.") for c in classnames])
    rc.check_prompts("fedclip_ref", rows, args.classes)
    images = torch.randn(args.batch, 3, args.image, args.image)
    labels = torch.arange(args.batch) % args.classes
    batch = {"img": images, "label": labels, "cname": [classnames[i] for i in labels.tolist()]}

    def train_step():  # Client_FedCLIP.train's loop body
        client.set_model_mode("train")
        loss, _ = client.forward_backward(batch, "bench", classnames)
        client.model_backward_and_update(loss)
        loss.item()

    def eval_step():  # local_test: every class's prompt
        client.set_model_mode("eval")
        with torch.no_grad():
            client.model_inference(images, classnames)

    rc.run(args, torch, ob, "fedclip", train_step, eval_step,
           [p for p in model.parameters() if p.requires_grad],
           {"feature_dim": 512, "train_text_prompts": args.batch, "eval_text_prompts": args.classes})


if __name__ == "__main__":
    main()
