package clip

// FeatureTokens is the number of tokens per image of EncodeImageTokens:
// Tokens() on a ViT (class token + patches), the attention pool's grid
// positions plus its mean token, (ImageSize/32)² + 1, on a ResNet.
func (c VisionConfig) FeatureTokens() int {
	if c.ResNet {
		g := c.ImageSize / 32
		return g*g + 1
	}
	return c.Tokens()
}

// EncodeImageTokens returns the features of every image token [B, T, E],
// T = FeatureTokens(). On a ViT: the output of the last block with ln_post
// applied per token, @ proj (FedOTP's image side; token 0 is the class
// token, whose row equals EncodeImage's feature, tokens 1..T−1 are the
// patches). On a ResNet: the attention pool's output at every token, as
// PLOT's modified CLIP computes it (resnet.Encoder.EncodeTokens; token 0 is
// the mean token, the pooled feature, tokens 1..T−1 the spatial
// positions). Inference only.
func (m *Model) EncodeImageTokens(pixels []float32, B int) []float32 {
	if m.ResNet != nil {
		feat := make([]float32, B*m.ResNet.Tokens()*m.W.Config.EmbedDim)
		m.ResNet.EncodeTokens(feat, pixels, B)
		return feat
	}
	v := m.Vision
	T, D := v.Cfg.Tokens(), v.Cfg.Width
	x0 := v.AdaptEmbed(v.EmbedForward(pixels, B), B)
	x := v.Stack.Forward(x0, B, T, 0, len(v.Stack.Blocks), nil, false)
	feat := make([]float32, B*T*m.W.Config.EmbedDim)
	var h projHead
	h.forward(feat, x, B*T, D, v.W.LnPostW, v.W.LnPostB, v.W.Proj)
	return feat
}
