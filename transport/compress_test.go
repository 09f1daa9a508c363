package transport

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
	"github.com/pfedmma/pfedmma/transport/pb"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// roundTripProxy is the simulation's compression (experiment's proxy): the
// client receives and sends its tensors encoded and decoded.
type roundTripProxy struct {
	federation.ClientProxy
	c compress.Codec
}

func (p roundTripProxy) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	var err error
	if ins.Params, err = p.c.RoundTrip(ins.Params); err != nil {
		return federation.FitRes{}, err
	}
	res, err := p.ClientProxy.Fit(ctx, ins)
	if err != nil {
		return res, err
	}
	res.Params, err = p.c.RoundTrip(res.Params)
	return res, err
}

func (p roundTripProxy) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	var err error
	if ins.Params, err = p.c.RoundTrip(ins.Params); err != nil {
		return federation.EvaluateRes{}, err
	}
	return p.ClientProxy.Evaluate(ctx, ins)
}

// TestCompressedNetworkMatchesInProcess: with fp16 and with int8, a
// networked federation (the coordinator encodes every task, the sites
// their uploads) gives the in-process run with the same encode→decode,
// bit for bit, and both report the encoded bytes; the encoding changes the
// result (it is applied) and the bytes shrink.
func TestCompressedNetworkMatchesInProcess(t *testing.T) {
	const n, rounds, seed = 3, 3, 7
	plain, plainHist := reference(t, n, rounds, 1, seed)
	for _, c := range []compress.Codec{compress.FP16, compress.Int8} {
		t.Run(string(c), func(t *testing.T) {
			dir := t.TempDir()
			var proxies []federation.ClientProxy
			for i := range n {
				proxies = append(proxies, roundTripProxy{federation.NewSite(toy.New(i), filepath.Join(dir, fmt.Sprint(i))), c})
			}
			strat := toy.Strategy()
			strat.EvaluateGlobal = true
			co := &federation.Coordinator{Strategy: strat, Proxies: proxies, Rounds: rounds, Fraction: 1, Seed: seed,
				Logger: quietLogger(), PayloadBytes: c.Bytes}
			wantHist, err := co.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			f := startFed(t, fedOpts{n: n, rounds: rounds, fraction: 1, seed: seed, compress: c, evalGlobal: true})
			f.wait(t)
			if f.err != nil {
				t.Fatal(f.err)
			}
			sameNamed(t, f.strat.Global(), strat.Global())
			if slices.Equal(strat.Global()["shared.w"].Data, plain["shared.w"].Data) {
				t.Errorf("%s left the global as without compression: not applied", c)
			}
			// the dashboard shows the encoded bytes, and the bytes
			// counters count them
			st := f.srv.Status()
			var up int64
			for r := range rounds {
				up += f.hist.Rounds[r].BytesUp
				if st.History[r].BytesUp != f.hist.Rounds[r].BytesUp || st.History[r].BytesDown != f.hist.Rounds[r].BytesDown {
					t.Errorf("dashboard round %d: %d bytes up, %d down; the round report %d, %d", r,
						st.History[r].BytesUp, st.History[r].BytesDown, f.hist.Rounds[r].BytesUp, f.hist.Rounds[r].BytesDown)
				}
			}
			if st.Compress != string(c) {
				t.Errorf("dashboard: compress %q, want %q", st.Compress, c)
			}
			var m dto.Metric
			if err := f.srv.Metrics().PayloadIn.Write(&m); err != nil {
				t.Fatal(err)
			}
			if got := m.GetCounter().GetValue(); got != float64(up) {
				t.Errorf("pfedmma_bytes_in_total %v, want the %d encoded bytes uploaded", got, up)
			}
			for r := range rounds {
				g, w := f.hist.Rounds[r], wantHist.Rounds[r]
				if g.BytesUp != w.BytesUp || g.BytesDown != w.BytesDown || fmt.Sprint(g.Eval) != fmt.Sprint(w.Eval) {
					t.Fatalf("round %d: network %+v, in process %+v", r, g, w)
				}
				if want := int64(n) * int64(c.Size(3)); g.BytesUp != want || g.BytesUp >= plainHist.Rounds[r].BytesUp {
					t.Errorf("round %d: %d bytes up, want %d (%d uncompressed)", r, g.BytesUp, want, plainHist.Rounds[r].BytesUp)
				}
			}
		})
	}
}

// reseal recomputes a blob's size and SHA-256 after data was changed, so
// that the decoder's own checks are reached.
func reseal(data []byte, b *pb.Blob) *pb.Blob {
	c := proto.Clone(b).(*pb.Blob)
	c.Size = int64(len(data))
	sum := sha256.Sum256(data)
	c.Sha256 = sum[:]
	return c
}

// TestCompressedPayloadRefusals: a malformed compressed payload is refused
// as malformed, naming the tensor and the field.
func TestCompressedPayloadRefusals(t *testing.T) {
	msg := tensor.Named{"a": {Shape: []int{2, 40}, Data: make([]float32, 80)}, "b": {Shape: []int{3}, Data: []float32{1, -2, 3}}}
	for i := range msg["a"].Data {
		msg["a"].Data[i] = float32(i) / 10
	}
	spec := Spec{"a": {2, 40}, "b": {3}}
	lim := Limits{}.withDefaults()
	for _, c := range []compress.Codec{compress.FP16, compress.Int8} {
		data, blob, err := encodeMessage(msg, c)
		if err != nil {
			t.Fatal(err)
		}
		got, rf := decodeBlob(data, blob, spec, lim)
		if rf != nil {
			t.Fatalf("%s: %v", c, rf.msg)
		}
		want, _ := c.RoundTrip(msg)
		sameNamed(t, got, want)
		if len(data) != int(c.Bytes(msg)) {
			t.Errorf("%s: %d bytes on the wire, Codec.Bytes says %d", c, len(data), c.Bytes(msg))
		}
	}
	data8, blob8, _ := encodeMessage(msg, compress.Int8)
	data16, blob16, _ := encodeMessage(msg, compress.FP16)
	aLen := compress.Int8.Size(80) // "a" comes first
	nanScale := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	patch := func(b []byte, at int, with []byte) []byte {
		out := slices.Clone(b)
		copy(out[at:], with)
		return out
	}
	for _, tc := range []struct {
		name  string
		data  []byte
		blob  *pb.Blob
		code  string
		wants []string
	}{
		{"NaN scale", patch(data8, aLen, nanScale), blob8, ReasonMalformed, []string{`tensor "b"`, "scale of block 0", "int8"}},
		{"code -128", patch(data8, 2*4+5, []byte{0x80}), blob8, ReasonMalformed, []string{`tensor "a"`, "code of element 5"}},
		{"fp16 Inf", patch(data16, 2*80+2, []byte{0x00, 0x7c}), blob16, ReasonMalformed, []string{`tensor "b"`, "element 1", "fp16"}},
		{"truncated", data8[:len(data8)-1], blob8, ReasonMalformed, []string{`tensor "b"`, "payload ends"}},
		{"extra bytes", append(slices.Clone(data8), 0), blob8, ReasonMalformed, []string{"1 bytes beyond"}},
		{"block size", data8, func() *pb.Blob { b := proto.Clone(blob8).(*pb.Blob); b.BlockSize = 32; return b }(), ReasonMalformed, []string{"block_size", "32"}},
		{"unknown codec", data8, func() *pb.Blob { b := proto.Clone(blob8).(*pb.Blob); b.Compression = "int4"; return b }(), ReasonMalformed, []string{"compression", "int4"}},
		{"shape", data8, func() *pb.Blob {
			b := proto.Clone(blob8).(*pb.Blob)
			b.Tensors[1].Shape = []int64{4}
			return b
		}(), ReasonShape, []string{`tensor "b"`, "[4]"}},
	} {
		_, rf := decodeBlob(tc.data, reseal(tc.data, tc.blob), spec, lim)
		if rf == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if rf.code != tc.code {
			t.Errorf("%s: reason %s, want %s (%s)", tc.name, rf.code, tc.code, rf.msg)
		}
		for _, w := range tc.wants {
			if !strings.Contains(rf.msg, w) {
				t.Errorf("%s: %q does not name %q", tc.name, rf.msg, w)
			}
		}
	}
	// NaN cannot be sent compressed: the encoder names the tensor
	bad := tensor.Named{"x": {Shape: []int{2}, Data: []float32{1, float32(math.Inf(1))}}}
	if _, _, err := encodeMessage(bad, compress.Int8); err == nil || !strings.Contains(err.Error(), `tensor "x"`) || !strings.Contains(err.Error(), "element 1") {
		t.Errorf("encoding +Inf: %v, want an error naming tensor x and element 1", err)
	}
}

// TestUploadCompressionMustMatch: the coordinator refuses an upload encoded
// otherwise than federation.compress says, naming the key.
func TestUploadCompressionMustMatch(t *testing.T) {
	for _, tc := range []struct {
		want compress.Codec
		blob *pb.Blob
		ok   bool
	}{
		{"", &pb.Blob{}, true},
		{compress.None, &pb.Blob{Compression: "none"}, true},
		{compress.Int8, &pb.Blob{Compression: "int8"}, true},
		{compress.Int8, &pb.Blob{}, false},
		{compress.Int8, &pb.Blob{Compression: "fp16"}, false},
		{"", &pb.Blob{Compression: "int8"}, false},
	} {
		s := &Server{cfg: ServerConfig{Compress: tc.want}}
		rf := s.checkCompression(tc.blob)
		if (rf == nil) != tc.ok {
			t.Errorf("federation.compress %q, upload %q: refusal %v, want ok=%v", tc.want, tc.blob.Compression, rf, tc.ok)
		}
		if rf != nil && (rf.code != ReasonConfig || !strings.Contains(rf.msg, "federation.compress")) {
			t.Errorf("refusal %s %q, want %s naming federation.compress", rf.code, rf.msg, ReasonConfig)
		}
	}
}
