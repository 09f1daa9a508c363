package experiment

import (
	"context"
	"fmt"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/federation"
)

// compressed wraps a simulated client's proxy so that it receives and
// sends what it would over the wire with o.Compress (federation.compress):
// the tensors of its fit and evaluation instructions, and of its upload,
// each encoded and decoded. The transport encodes the same messages with
// the same codec, so serve + sites equal `pfedmma run`. Without
// compression the proxy is returned as it is.
func (o Options) compressed(p federation.ClientProxy) federation.ClientProxy {
	if o.Compress == "" || o.Compress == compress.None {
		return p
	}
	return &compressProxy{ClientProxy: p, codec: o.Compress}
}

// compressProxy is a ClientProxy whose messages go through a codec.
type compressProxy struct {
	federation.ClientProxy
	codec compress.Codec
}

// Fit implements federation.ClientProxy: download and upload compressed.
func (p *compressProxy) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	in, err := p.codec.RoundTrip(ins.Params)
	if err != nil {
		return federation.FitRes{}, fmt.Errorf("client %d round %d download: %w", p.ID(), ins.Round, err)
	}
	ins.Params = in
	res, err := p.ClientProxy.Fit(ctx, ins)
	if err != nil {
		return res, err
	}
	if res.Params, err = p.codec.RoundTrip(res.Params); err != nil {
		return federation.FitRes{}, fmt.Errorf("client %d round %d upload: %w", p.ID(), ins.Round, err)
	}
	return res, nil
}

// Evaluate implements federation.ClientProxy: the evaluation's tensors
// arrive compressed.
func (p *compressProxy) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	in, err := p.codec.RoundTrip(ins.Params)
	if err != nil {
		return federation.EvaluateRes{}, fmt.Errorf("client %d round %d evaluation download: %w", p.ID(), ins.Round, err)
	}
	ins.Params = in
	return p.ClientProxy.Evaluate(ctx, ins)
}
