package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/internal/toy"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// rawServer is an insecure Server with sites s0 and s1 (spec w: [2]) and
// a client speaking the protocol by hand.
func rawServer(t *testing.T, offline time.Duration) (*Server, pb.FederationClient) {
	t.Helper()
	srv, err := NewServer(ServerConfig{Sites: []string{"s0", "s1"}, Insecure: true, Spec: Spec{"w": {2}},
		PollWait: time.Second, OfflineAfter: offline, Logger: quietLogger(), Task: &Task{Experiment: []byte("x: 1\n")}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC().Serve(lis)
	t.Cleanup(srv.GRPC().Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, pb.NewFederationClient(conn)
}

// as is ctx with a session and (when given) an instance header.
func as(ctx context.Context, session, instance string) context.Context {
	if session != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, sessionHeader, session)
	}
	if instance != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, instanceHeader, instance)
	}
	return ctx
}

func register(ctx context.Context, cli pb.FederationClient, site string) error {
	_, err := cli.Register(ctx, &pb.RegisterRequest{ProtocolVersion: ProtocolVersion, Site: site, NumExamples: 3,
		ClientId: map[string]int64{"s0": 0, "s1": 1}[site]})
	return err
}

func heartbeat(ctx context.Context, cli pb.FederationClient, site string) error {
	_, err := cli.Heartbeat(ctx, &pb.HeartbeatRequest{ProtocolVersion: ProtocolVersion, Site: site})
	return err
}

func (s *Server) contact(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[name].lastContact
}

// TestSessionlessRequestsRefused: a request without a session (the header
// every site process sends) is refused, heartbeat, task poll, upload and
// registration alike; the one sessionless request allowed, fetching the
// task before registering, leaves the registered session's last contact
// alone (a restarted site fetching its task kept its dead process alive).
func TestSessionlessRequestsRefused(t *testing.T) {
	srv, cli := rawServer(t, time.Minute)
	ctx := t.Context()
	a := as(ctx, "session-a", "")
	if err := register(a, cli, "s0"); err != nil {
		t.Fatal(err)
	}
	if err := heartbeat(ctx, cli, "s0"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "no session") {
		t.Errorf("heartbeat without a session: %v, want refused (FailedPrecondition, no session)", err)
	}
	if err := register(ctx, cli, "s0"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("registration without a session: %v, want refused", err)
	}
	gt, err := cli.GetTask(ctx, &pb.TaskRequest{ProtocolVersion: ProtocolVersion, Site: "s0"})
	if err == nil {
		_, err = gt.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("task poll without a session: %v, want refused", err)
	}
	us, err := cli.UploadUpdate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	us.Send(&pb.UpdateChunk{Part: &pb.UpdateChunk_Header{Header: &pb.UpdateHeader{ProtocolVersion: ProtocolVersion, Site: "s0", TaskId: "x", NumExamples: 3}}})
	if _, err := us.CloseAndRecv(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("upload without a session: %v, want refused", err)
	}
	// the task fetch of a restarted site, before it registers
	before := srv.contact("s0")
	time.Sleep(20 * time.Millisecond)
	rep, err := cli.Register(ctx, &pb.RegisterRequest{ProtocolVersion: ProtocolVersion, Site: "s0", ClientId: 0, TaskWanted: true})
	if err != nil || rep.Task == nil {
		t.Fatalf("sessionless task fetch: %v, %v", rep, err)
	}
	if got := srv.contact("s0"); !got.Equal(before) {
		t.Fatalf("a sessionless task fetch moved session-a's last contact from %v to %v", before, got)
	}
	// the registered session itself is refreshed by its heartbeat
	if err := heartbeat(a, cli, "s0"); err != nil {
		t.Fatal(err)
	}
	if !srv.contact("s0").After(before) {
		t.Fatal("the session's own heartbeat did not refresh its last contact")
	}
}

// TestRestartedInstanceTakesOver: a new session presenting the registered
// session's instance (the same state folder: the site restarted) takes
// over at once, and the replaced session is refused from then on; a new
// session with another instance (a second process with the certificate)
// is refused while the current one is alive, and takes over once it is
// offline.
func TestRestartedInstanceTakesOver(t *testing.T) {
	srv, cli := rawServer(t, 2*time.Second)
	ctx := t.Context()
	old, restarted, other := as(ctx, "s-old", "inst-1"), as(ctx, "s-new", "inst-1"), as(ctx, "s-other", "inst-2")
	if err := register(old, cli, "s0"); err != nil {
		t.Fatal(err)
	}
	if err := register(restarted, cli, "s0"); err != nil {
		t.Fatalf("the restarted site (same instance) was refused: %v", err)
	}
	if err := heartbeat(restarted, cli, "s0"); err != nil {
		t.Fatalf("the restarted site's heartbeat: %v", err)
	}
	if err := heartbeat(old, cli, "s0"); status.Code(err) != codes.AlreadyExists {
		t.Errorf("the replaced session's heartbeat: %v, want AlreadyExists", err)
	}
	if err := register(old, cli, "s0"); status.Code(err) != codes.AlreadyExists || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("the replaced session registering again: %v, want refused as replaced", err)
	}
	if err := register(other, cli, "s0"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a second process (another instance) while the site is alive: %v, want AlreadyExists", err)
	}
	// the current session dies: the other process may take over
	deadline := time.Now().Add(10 * time.Second)
	for register(other, cli, "s0") != nil {
		if time.Now().After(deadline) {
			t.Fatal("a new session never took over from a dead one")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if since := time.Since(srv.contact("s0")); since > time.Second {
		t.Fatalf("the new session's registration did not set its last contact (%v ago)", since)
	}
}

// TestUploadRevokedMidway: an upload whose header was accepted, whose site
// is then revoked before its data arrive, is discarded: refused with
// reason revoked, and the coordinator's Fit gets no result.
func TestUploadRevokedMidway(t *testing.T) {
	srv, cli := rawServer(t, time.Minute)
	ctx := as(t.Context(), "session-a", "")
	if err := register(ctx, cli, "s0"); err != nil {
		t.Fatal(err)
	}
	type out struct {
		res federation.FitRes
		err error
	}
	got := make(chan out, 1)
	go func() {
		r, err := srv.Proxies()[0].Fit(context.Background(), federation.FitIns{Round: 0, Params: tensor.Named{"w": {Shape: []int{2}, Data: []float32{1, 2}}}})
		got <- out{r, err}
	}()
	gt, err := cli.GetTask(ctx, &pb.TaskRequest{ProtocolVersion: ProtocolVersion, Site: "s0"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := gt.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := gt.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	h := first.GetHeader()
	data, blob, err := encodeBlob(tensor.Named{"w": {Shape: []int{2}, Data: []float32{5, 6}}})
	if err != nil {
		t.Fatal(err)
	}
	us, err := cli.UploadUpdate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := us.Send(&pb.UpdateChunk{Part: &pb.UpdateChunk_Header{Header: &pb.UpdateHeader{ProtocolVersion: ProtocolVersion, Site: "s0",
		TaskId: h.TaskId, Round: h.Round, NumExamples: 3, Params: blob}}}); err != nil {
		t.Fatal(err)
	}
	// the header is in: the task is being answered
	deadline := time.Now().Add(10 * time.Second)
	for !answering(srv, h.TaskId) {
		if time.Now().After(deadline) {
			t.Fatal("the upload's header was never claimed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Revoke("s0")
	if err := us.Send(&pb.UpdateChunk{Part: &pb.UpdateChunk_Data{Data: data}}); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	rep, err := us.CloseAndRecv()
	if err == nil && rep.Accepted {
		t.Fatal("an upload finished after its site's revocation was accepted")
	}
	if err == nil && !strings.HasPrefix(rep.Reason, ReasonRevoked) {
		t.Errorf("refusal %q, want reason %s", rep.Reason, ReasonRevoked)
	}
	select {
	case o := <-got:
		if o.err == nil || o.res.Params != nil {
			t.Fatalf("Fit = %+v, %v: the revoked site's upload reached the strategy", o.res, o.err)
		}
		if !strings.Contains(o.err.Error(), "revoked") {
			t.Errorf("Fit's error %q does not say the site was revoked", o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fit did not end")
	}
}

func answering(s *Server, taskID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.sites {
		for _, q := range st.queue {
			if q.id == taskID && q.state == taskAnswering {
				return true
			}
		}
	}
	return false
}

// TestRevokedSiteRekeyed: a connected site revoked by its certificate's
// serial (certs revoke) is cut off and leaves the schedule; given a new
// certificate (certs rekey) it registers again, rejoins the schedule and
// is aggregated in the later rounds; its old certificate stays refused.
func TestRevokedSiteRekeyed(t *testing.T) {
	t.Parallel() // 40 rounds of slow toy sites: it waits, and its deadlines are tens of seconds
	const rounds = 40
	f := startFed(t, fedOpts{n: 3, rounds: rounds, fraction: 1, seed: 1, timeout: time.Minute, minFit: 2,
		clients: slowClients(150 * time.Millisecond)})
	f.untilRound(t, 1)
	if err := certs.Revoke(f.dir, "site-1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for f.srv.Status().Sites[1].State != "revoked" {
		if time.Now().After(deadline) {
			t.Fatal("site-1 was never cut off")
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.cancel[1]()
	// a few rounds without it
	f.untilRound(t, f.srv.Status().Round+2)
	oldTLS, err := certs.SiteTLS(f.dir, "site-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.Rekey(f.dir, "site-1"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() {
		errs <- RunSite(t.Context(), SiteConfig{Addr: f.grpcAddr, CertsDir: f.dir, Name: "site-1",
			StateDir: filepath.Join(f.dir, "state", "site-1"), MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Logger: quietLogger()}, toy.New(1))
	}()
	old := &SiteRunner{Addr: f.grpcAddr, TLS: oldTLS, Name: "site-1", Site: federation.NewSite(toy.New(1), ""), Logger: quietLogger(),
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	octx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := old.Run(octx); !errors.Is(err, ErrRefused) {
		t.Errorf("the old certificate after rekey: %v, want refused", err)
	}
	f.waitFor(t, 120*time.Second)
	if f.err != nil {
		t.Fatal(f.err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("the re-keyed site: %v", err)
	}
	left, back := -1, -1
	for _, r := range f.hist.Rounds {
		_, in := r.Fit[1]
		switch {
		case left < 0 && slices.Contains(r.Departed, 1):
			left = r.Round
		case left >= 0 && back < 0 && in:
			back = r.Round
		}
	}
	if left < 0 || back < 0 {
		t.Fatalf("site-1 left the schedule at round %d and was back at round %d (want both)", left, back)
	}
	if _, in := f.hist.Rounds[rounds-1].Fit[1]; !in {
		t.Fatal("the re-keyed site is not aggregated in the last round")
	}
	t.Logf("site-1 left the schedule at round %d, back at round %d", left, back)
}
