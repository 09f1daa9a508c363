package client

import (
	"github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/prompt"
	"github.com/pfedmma/pfedmma/tensor"
)

// PredictLearner builds a prompt method's learner for a predictor: it
// tokenises the prompts "<n_ctx placeholder words> <class>." of classes as
// training builds them, makes the learner of those tokens with build and
// loads the saved site's tensors into the learner's parameters.
func PredictLearner[L interface{ Params() tensor.Named }](pe methods.PredictEnv, nCtx int, classes []string, saved tensor.Named, build func(tokens []int) (L, error)) (L, error) {
	var none L
	tokens, err := pe.ClassPromptTokens(classes, Placeholder(nCtx))
	if err != nil {
		return none, err
	}
	l, err := build(tokens)
	if err != nil {
		return none, err
	}
	if err := prompt.Load(l.Params(), saved); err != nil {
		return none, err
	}
	return l, nil
}
