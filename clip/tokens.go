package clip

// EncodeImageTokens returns the features of every image token [B, T, E]:
// the output of the last block with ln_post applied per token, @ proj
// (FedOTP's image side; token 0 is the class token, whose row equals
// EncodeImage's feature, tokens 1..T−1 are the patches). Inference only.
func (m *Model) EncodeImageTokens(pixels []float32, B int) []float32 {
	v := m.Vision
	T, D := v.Cfg.Tokens(), v.Cfg.Width
	x0 := v.AdaptEmbed(v.EmbedForward(pixels, B), B)
	x := v.Stack.Forward(x0, B, T, 0, len(v.Stack.Blocks), nil, false)
	feat := make([]float32, B*T*m.W.Config.EmbedDim)
	var h projHead
	h.forward(feat, x, B*T, D, v.W.LnPostW, v.W.LnPostB, v.W.Proj)
	return feat
}
