package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/pfedmma/pfedmma/coordstore"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/safetensors"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

func TestDecodeBlobRefusals(t *testing.T) {
	spec := Spec{"a": {2, 2}, "b": {3}}
	lim := Limits{MaxTensorBytes: 16}.withDefaults()
	good := tensor.Named{"a": tensor.New(2, 2), "b": tensor.New(3)}
	nan := good.Clone()
	nan["b"].Data[1] = float32(math.Inf(1))
	cases := []struct {
		name   string
		params tensor.Named
		spec   Spec
		edit   func(data []byte, b *pb.Blob) []byte
		code   string
	}{
		{"good", good, spec, nil, ""},
		{"unknown", tensor.Named{"a": tensor.New(2, 2), "b": tensor.New(3), "c": tensor.New(1)}, spec, nil, ReasonUnknownName},
		{"missing", tensor.Named{"a": tensor.New(2, 2)}, spec, nil, ReasonMissingName},
		{"shape", tensor.Named{"a": tensor.New(4), "b": tensor.New(3)}, spec, nil, ReasonShape},
		{"non-finite", nan, spec, nil, ReasonNonFinite},
		{"too large", tensor.Named{"a": tensor.New(2, 2), "b": tensor.New(3), "big": tensor.New(5)}, nil, nil, ReasonTooLarge},
		{"checksum", good, spec, func(d []byte, b *pb.Blob) []byte { d[len(d)-1] ^= 1; return d }, ReasonChecksum},
		{"size", good, spec, func(d []byte, b *pb.Blob) []byte { return d[:len(d)-4] }, ReasonMalformed},
		{"declared shape", good, spec, func(d []byte, b *pb.Blob) []byte { b.Tensors[0].Shape = []int64{4}; return d }, ReasonMalformed},
		{"undeclared", good, spec, func(d []byte, b *pb.Blob) []byte { b.Tensors = b.Tensors[:1]; return d }, ReasonMalformed},
	}
	for _, c := range cases {
		data, blob, err := encodeBlob(c.params)
		if err != nil {
			t.Fatal(err)
		}
		if c.edit != nil {
			data = c.edit(bytes.Clone(data), blob)
		}
		_, rf := decodeBlob(data, blob, c.spec, lim)
		switch {
		case c.code == "" && rf != nil:
			t.Errorf("%s: refused: %v", c.name, rf)
		case c.code != "" && (rf == nil || rf.code != c.code):
			t.Errorf("%s: got %v, want a %s refusal", c.name, rf, c.code)
		}
	}
	// a float64 tensor is refused by dtype
	var buf bytes.Buffer
	if err := safetensors.Encode(&buf, tensor.Named{"b": tensor.New(3)}, nil, nil, safetensors.WithFloatType(safetensors.F16)); err != nil {
		t.Fatal(err)
	}
	_, blob, _ := encodeBlob(tensor.Named{"b": tensor.New(3)})
	blob.Tensors[0].Dtype, blob.Size = "F16", int64(buf.Len())
	blob.Sha256 = sha(buf.Bytes())
	if _, rf := decodeBlob(buf.Bytes(), blob, nil, lim); rf == nil || rf.code != ReasonDType {
		t.Errorf("F16 upload: %v", rf)
	}
}

// TestRawClientReplayAndWrongRound speaks the protocol by hand: an upload
// for the wrong round and a replayed upload are refused with their reasons,
// and only the good upload reaches the proxy.
func TestRawClientReplayAndWrongRound(t *testing.T) {
	store, err := coordstore.Open(t.TempDir() + "/c.db")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv, err := NewServer(ServerConfig{Sites: []string{"s0"}, Insecure: true, Spec: Spec{"w": {2}}, Store: store,
		PollWait: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC().Serve(lis)
	defer srv.GRPC().Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := pb.NewFederationClient(conn)
	ctx := metadata.AppendToOutgoingContext(t.Context(), sessionHeader, "raw-client-session")
	if _, err := cli.Register(ctx, &pb.RegisterRequest{ProtocolVersion: ProtocolVersion, Site: "s0", NumExamples: 0}); err == nil {
		t.Fatal("registration with 0 examples accepted")
	}
	if _, err := cli.Register(ctx, &pb.RegisterRequest{ProtocolVersion: ProtocolVersion, Site: "nobody", NumExamples: 3}); err == nil {
		t.Fatal("registration of an unknown site accepted")
	}
	if _, err := cli.Register(ctx, &pb.RegisterRequest{ProtocolVersion: ProtocolVersion, Site: "s0", NumExamples: 3}); err != nil {
		t.Fatal(err)
	}
	proxy := srv.Proxies()[0]
	if proxy.NumExamples() != 3 {
		t.Fatalf("NumExamples %d", proxy.NumExamples())
	}
	type out struct {
		res federation.FitRes
		err error
	}
	got := make(chan out, 1)
	go func() {
		r, err := proxy.Fit(context.Background(), federation.FitIns{Round: 4, Params: tensor.Named{"w": {Shape: []int{2}, Data: []float32{1, 2}}}})
		got <- out{r, err}
	}()
	st, err := cli.GetTask(ctx, &pb.TaskRequest{ProtocolVersion: ProtocolVersion, Site: "s0"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	h := first.GetHeader()
	if h.Kind != pb.TaskKind_TASK_KIND_FIT || h.Round != 4 {
		t.Fatalf("task %v", h)
	}
	for {
		if _, err := st.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	upload := func(round int64, taskID string, w []float32) *pb.UploadReply {
		t.Helper()
		data, blob, err := encodeBlob(tensor.Named{"w": {Shape: []int{len(w)}, Data: w}})
		if err != nil {
			t.Fatal(err)
		}
		us, err := cli.UploadUpdate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		us.Send(&pb.UpdateChunk{Part: &pb.UpdateChunk_Header{Header: &pb.UpdateHeader{ProtocolVersion: ProtocolVersion, Site: "s0",
			TaskId: taskID, Round: round, NumExamples: 3, Params: blob}}})
		us.Send(&pb.UpdateChunk{Part: &pb.UpdateChunk_Data{Data: data}})
		rep, err := us.CloseAndRecv()
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := upload(3, h.TaskId, []float32{5, 6}); rep.Accepted || !strings.HasPrefix(rep.Reason, ReasonWrongRound) {
		t.Fatalf("wrong round: %+v", rep)
	}
	if rep := upload(4, "feedface", []float32{5, 6}); rep.Accepted || !strings.HasPrefix(rep.Reason, ReasonUnknownTask) {
		t.Fatalf("unknown task: %+v", rep)
	}
	if rep := upload(4, h.TaskId, []float32{5, 6}); !rep.Accepted {
		t.Fatalf("good upload refused: %s", rep.Reason)
	}
	if rep := upload(4, h.TaskId, []float32{7, 8}); rep.Accepted || !strings.HasPrefix(rep.Reason, ReasonReplay) {
		t.Fatalf("replay: %+v", rep)
	}
	o := <-got
	if o.err != nil || o.res.Params["w"].Data[0] != 5 || o.res.NumExamples != 3 {
		t.Fatalf("Fit = %+v, %v", o.res, o.err)
	}
	n, err := store.Updates(4, "fit")
	if err != nil || n != 1 {
		t.Fatalf("stored updates %d, %v", n, err)
	}
	reasons, _ := store.Refusals()
	if len(reasons) != 3 {
		t.Fatalf("stored refusals %q", reasons)
	}
	if _, err := cli.Heartbeat(ctx, &pb.HeartbeatRequest{ProtocolVersion: 9, Site: "s0"}); err == nil || !strings.Contains(err.Error(), "protocol version 9 refused") {
		t.Fatalf("heartbeat of version 9: %v", err)
	}
}

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}
