package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// rogueCoordinator is a coordinator that does what a site must not trust:
// it sends one fit task of its choosing (header and raw chunks), then DONE,
// and counts what the site sends back.
type rogueCoordinator struct {
	pb.UnimplementedFederationServer
	header *pb.TaskHeader
	chunks [][]byte

	mu          sync.Mutex
	sent        bool
	chunksSent  int
	uploads     int
	uploadBytes int
	secAgg      int
}

func (c *rogueCoordinator) Register(_ context.Context, req *pb.RegisterRequest) (*pb.RegisterReply, error) {
	return &pb.RegisterReply{ProtocolVersion: ProtocolVersion, ClientId: req.ClientId}, nil
}

func (c *rogueCoordinator) Heartbeat(context.Context, *pb.HeartbeatRequest) (*pb.HeartbeatReply, error) {
	return &pb.HeartbeatReply{}, nil
}

func (c *rogueCoordinator) GetTask(_ *pb.TaskRequest, st grpc.ServerStreamingServer[pb.TaskChunk]) error {
	c.mu.Lock()
	sent := c.sent
	c.sent = true
	c.mu.Unlock()
	if sent {
		return st.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: &pb.TaskHeader{ProtocolVersion: ProtocolVersion, Kind: pb.TaskKind_TASK_KIND_DONE}}})
	}
	if err := st.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Header{Header: c.header}}); err != nil {
		return err
	}
	for _, d := range c.chunks {
		if err := st.Send(&pb.TaskChunk{Part: &pb.TaskChunk_Data{Data: d}}); err != nil {
			return nil // the site hung up
		}
		c.mu.Lock()
		c.chunksSent++
		c.mu.Unlock()
	}
	return nil
}

func (c *rogueCoordinator) UploadUpdate(st grpc.ClientStreamingServer[pb.UpdateChunk, pb.UploadReply]) error {
	n := 0
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		n += len(m.GetData())
	}
	c.mu.Lock()
	c.uploads++
	c.uploadBytes += n
	c.mu.Unlock()
	return st.SendAndClose(&pb.UploadReply{Accepted: true})
}

func (c *rogueCoordinator) SecAgg(context.Context, *pb.SecAggRequest) (*pb.SecAggReply, error) {
	c.mu.Lock()
	c.secAgg++
	c.mu.Unlock()
	return &pb.SecAggReply{Reason: "the rogue coordinator runs no secure aggregation"}, nil
}

// serveRogue serves c on a free port.
func serveRogue(t *testing.T, c *rogueCoordinator) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
	pb.RegisterFederationServer(g, c)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// fitTask is a fit task carrying params w=[1 2], with the given settings.
func fitTask(t *testing.T, config map[string]string) (*pb.TaskHeader, [][]byte) {
	t.Helper()
	data, blob, err := encodeBlob(tensor.Named{"w": policyVec(1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	return &pb.TaskHeader{ProtocolVersion: ProtocolVersion, TaskId: "t1", Round: 1, Kind: pb.TaskKind_TASK_KIND_FIT, Params: blob, Config: config}, [][]byte{data}
}

// uploader is a site whose Fit returns out (and counts its calls).
type uploader struct {
	out  tensor.Named
	mu   sync.Mutex
	fits int
}

func (u *uploader) ID() int          { return 0 }
func (u *uploader) NumExamples() int { return 10 }
func (u *uploader) Fit(context.Context, federation.FitIns) (federation.FitRes, error) {
	u.mu.Lock()
	u.fits++
	u.mu.Unlock()
	return federation.FitRes{Params: u.out, NumExamples: 10}, nil
}
func (u *uploader) Evaluate(context.Context, federation.EvaluateIns) (federation.EvaluateRes, error) {
	return federation.EvaluateRes{}, nil
}

// runAgainst runs site r against the rogue coordinator c until it ends.
func runAgainst(t *testing.T, c *rogueCoordinator, r *SiteRunner) error {
	t.Helper()
	r.Addr, r.Insecure, r.Name, r.Logger = serveRogue(t, c), true, "s0", quietLogger()
	r.MinBackoff, r.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	return r.Run(ctx)
}

// TestSiteRequiresSecureAggregation (issue 34, finding 2): a coordinator
// that omits the secure-aggregation session from a fit task gets no upload
// in the clear from a site that requires secure aggregation — the site
// refuses before training, naming why; without the requirement the same
// task is answered in the clear.
func TestSiteRequiresSecureAggregation(t *testing.T) {
	h, chunks := fitTask(t, nil)
	c := &rogueCoordinator{header: h, chunks: chunks}
	site := &uploader{out: tensor.Named{"w": policyVec(3, 4)}}
	err := runAgainst(t, c, &SiteRunner{Site: site, RequireSecureAggregation: true})
	if !errors.Is(err, ErrUploadRefused) || !strings.Contains(err.Error(), "without a secure-aggregation session") {
		t.Errorf("a fit task without secure aggregation at a site requiring it: %v; want a refusal naming the missing session", err)
	}
	if c.uploads != 0 || site.fits != 0 {
		t.Errorf("the site trained %d times and uploaded %d times in the clear; want neither", site.fits, c.uploads)
	}
	// the oracle: the same coordinator gets the clear upload from a site
	// that does not require it (so the refusal above is the requirement's)
	c2 := &rogueCoordinator{header: h, chunks: chunks}
	if err := runAgainst(t, c2, &SiteRunner{Site: site}); err != nil || c2.uploads != 1 {
		t.Errorf("a site without the requirement: %v, %d uploads; want one clear upload", err, c2.uploads)
	}
}

// TestSiteRefusesUploadOutsideItsList (issue 34, finding 1): the site sends
// nothing but the tensors it computed it uploads, with their shapes, within
// its size limit (a masked update counting 8 bytes a value).
func TestSiteRefusesUploadOutsideItsList(t *testing.T) {
	w := policyVec(3, 4)
	h, chunks := fitTask(t, nil)
	hs, schunks := fitTask(t, map[string]string{SecAggSessionKey: strings.Repeat("ab", 32), secAggSitesKey: "0,1",
		secAggDegreeKey: "1", secAggThresholdKey: "2", secAggClipKey: "1", secAggScaleKey: "16", secAggUniformKey: "false"})
	for _, tc := range []struct {
		name     string
		h        *pb.TaskHeader
		chunks   [][]byte
		out      tensor.Named
		max      int64
		want     string // "" accepted
		uploaded int
	}{
		{"the declared tensor", h, chunks, tensor.Named{"w": w}, 0, "", 8},
		{"a private tensor besides", h, chunks, tensor.Named{"w": w, "private/p": policyVec(5)}, 0, `tensor "private/p" is not among`, 0},
		{"another shape", h, chunks, tensor.Named{"w": policyVec(3, 4, 5, 6)}, 0, `tensor "w" has shape [4], but this site computed [2]`, 0},
		{"within the limit", h, chunks, tensor.Named{"w": w}, 8, "", 8},
		{"over the limit", h, chunks, tensor.Named{"w": w}, 7, "8 bytes encoded as f32, over this site's limit of 7 bytes", 0},
		{"masked over the limit", hs, schunks, tensor.Named{"w": w}, 23, "masked update weighs 24 bytes", 0},
	} {
		c := &rogueCoordinator{header: tc.h, chunks: tc.chunks}
		err := runAgainst(t, c, &SiteRunner{Site: &uploader{out: tc.out}, Uploads: Spec{"w": {2}}, MaxUploadBytes: tc.max})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrUploadRefused) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want the site's refusal naming %q", tc.name, err, tc.want)
		}
		if c.uploadBytes < tc.uploaded || (tc.uploaded == 0 && (c.uploads != 0 || c.secAgg != 0)) {
			t.Errorf("%s: the coordinator received %d uploads (%d bytes) and %d secure-aggregation steps", tc.name, c.uploads, c.uploadBytes, c.secAgg)
		}
	}
}

// TestSiteBoundsTaskDownload (issue 34, finding 3): a task whose parameters
// exceed the site's download limit, or that sends more bytes than it
// declares, is refused before the bytes are kept.
func TestSiteBoundsTaskDownload(t *testing.T) {
	h, chunks := fitTask(t, nil)
	huge := &pb.TaskHeader{ProtocolVersion: ProtocolVersion, TaskId: "t1", Round: 1, Kind: pb.TaskKind_TASK_KIND_FIT,
		Params: &pb.Blob{Size: 1 << 30, Sha256: h.Params.Sha256, Tensors: []*pb.TensorInfo{{Name: "w", Dtype: "F32", Shape: []int64{1 << 28}}}}}
	mib := make([]byte, ChunkSize)
	flood := [][]byte{mib, mib, mib, mib}
	for _, tc := range []struct {
		name   string
		h      *pb.TaskHeader
		chunks [][]byte
		limit  int64
		want   string
	}{
		{"declared over the default limit", huge, flood, 0, "declares 1073741824 bytes of parameters, over this site's download limit of 268435456 bytes"},
		{"declared over the site's limit", h, chunks, int64(len(chunks[0]) - 1), "over this site's download limit"},
		{"more than declared", h, append([][]byte{chunks[0]}, flood...), 0, "sends more than the"},
	} {
		c := &rogueCoordinator{header: tc.h, chunks: tc.chunks}
		site := &uploader{out: tensor.Named{"w": policyVec(3, 4)}}
		err := runAgainst(t, c, &SiteRunner{Site: site, MaxDownloadBytes: tc.limit})
		if !errors.Is(err, ErrDownloadRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a refusal naming %q", tc.name, err, tc.want)
		}
		if site.fits != 0 || c.uploads != 0 {
			t.Errorf("%s: the site trained %d times, uploaded %d times", tc.name, site.fits, c.uploads)
		}
	}
	// the same task within the limit is run
	c := &rogueCoordinator{header: h, chunks: chunks}
	if err := runAgainst(t, c, &SiteRunner{Site: &uploader{out: tensor.Named{"w": policyVec(3, 4)}}, MaxDownloadBytes: int64(len(chunks[0]))}); err != nil || c.uploads != 1 {
		t.Errorf("a task at the site's limit: %v, %d uploads", err, c.uploads)
	}
}

// policyVec is a vector tensor.
func policyVec(v ...float32) *tensor.Tensor {
	t, err := tensor.FromData(v, len(v))
	if err != nil {
		panic(err)
	}
	return t
}
