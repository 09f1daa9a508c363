package assets

// minNovelTop1 is the least zero-shot top-1 the shipped model's class token
// must reach on a 10-way subset of held-out compositions (chance 0.1).
const minNovelTop1 = 0.5

// minNovelPatchTop1 is the same bound for the mean of its patch tokens
// (pretrain.EvalWorldPatches). The class-token-only model that preceded the
// dense-pretrained one was near chance here.
const minNovelPatchTop1 = 0.5
