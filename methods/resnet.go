package methods

// ResNetTokens is implemented by a method on TokenFeatures whose authors'
// code also runs it on a ResNet CLIP, with the attention pool's output at
// every token as the image's local features (PLOT: plot-coop's
// AttentionPool2d; clip/resnet.Encoder.EncodeTokens). Such a method runs on
// a ResNet CLIP; a token method that is not one is refused there (no test
// shows it there).
type ResNetTokens interface {
	// ResNetTokens names the authors' code whose every-token attention
	// pool the method's ResNet tokens reproduce.
	ResNetTokens() string
}

// RunsOnResNet says whether meth, whose Depth is depth, runs on a ResNet
// CLIP: on the image features (Features, AnyDepth), or on the tokens
// (TokenFeatures) when it is a ResNetTokens.
func RunsOnResNet(meth Method, depth int) bool {
	switch depth {
	case Features, AnyDepth:
		return true
	case TokenFeatures:
		_, ok := meth.(ResNetTokens)
		return ok
	}
	return false
}
