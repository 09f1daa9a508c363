package pretrain

// Help is the long help of `pfedmma pretrain`.
const Help = `Pretrain trains a small CLIP (both encoders from scratch) with CLIP's
symmetric contrastive loss on captioned images of the generated world, whose
held-out compositions never appear, and — when Debian's dataset-fashion-mnist
is installed — Fashion-MNIST images with templated captions.

It learns a BPE vocabulary from the captions and writes into --out:
model.safetensors (OpenAI names), bpe_simple_vocab_16e6.txt.gz, vocab.json +
merges.txt, pretrain.json (options, zero-shot accuracy on seen and held-out
compositions, wall time, the reproduce command) and the resumable state
pretrain-state.safetensors. Interrupt it and continue with --resume.`
