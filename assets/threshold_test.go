package assets

// minNovelTop1 is the least zero-shot top-1 the shipped model must reach on
// a 10-way subset of held-out compositions (chance 0.1). The shipped model
// measured 0.96 and 0.90 on the two subsets the test draws.
const minNovelTop1 = 0.5
