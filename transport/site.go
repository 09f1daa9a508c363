package transport

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// SiteRunner serves one site's participant to a coordinator: it registers,
// fetches tasks, runs them on Site and sends the answers, and keeps retrying
// with exponential backoff while the coordinator is away. Run returns nil
// when the coordinator says the federation is over.
type SiteRunner struct {
	// Addr is the coordinator's host:port.
	Addr string
	// TLS is the site's mTLS configuration (certs.SiteTLS). Nil requires
	// Insecure.
	TLS      *tls.Config
	Insecure bool
	// Name is the site's name (its certificate's CN).
	Name string
	// Site answers the tasks: normally a *federation.Site, which restores
	// the state for whatever round it is asked.
	Site federation.ClientProxy
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts (defaults 100 ms and 5 s).
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	// Version overrides the protocol version sent (tests only; 0 means
	// ProtocolVersion).
	Version uint32
	// Settings is the site's resolved configuration ("key=value" lines),
	// sent at registration: a coordinator with other settings refuses the
	// site, naming them.
	Settings []string
	// DuplicateGrace is how long the site keeps retrying while the
	// coordinator says another process serves this site (a restarted
	// site's old session expires) before it gives up (default 1 minute).
	DuplicateGrace time.Duration
	// SecAggHook, when set, is called after each step of secure
	// aggregation the coordinator accepted (its pb.SecAggStep name) in
	// round: for tests that stop a site between steps.
	SecAggHook func(step string, round int)
	// SecAgg is the site's own secure-aggregation settings (secagg_site.go).
	SecAgg SecAggSite
	// Uploads, when not nil, is what this site computed it uploads from
	// the task it accepted (each shared tensor's name and shape, F32): an
	// upload holding another name or another shape is refused by the site
	// (Run returns an error wrapping ErrUploadRefused) and nothing is sent.
	Uploads Spec
	// MaxUploadBytes, when positive, bounds every real upload: its encoded
	// tensor values (federation.compress's codec), or its masked vector
	// under secure aggregation (8 bytes a value and 8 for the weight). An
	// upload over it is refused by the site and nothing is sent.
	MaxUploadBytes int64
	// RequireSecureAggregation refuses a fit task that comes without a
	// secure-aggregation session: the site never uploads in the clear (Run
	// returns an error wrapping ErrUploadRefused before training).
	RequireSecureAggregation bool
	// MinParticipants, when positive, is the fewest sites the site accepts
	// in a secure-aggregation round (the site's policy, min_participants):
	// the secure-aggregation layer refuses a smaller participant set.
	MinParticipants int
	// MaxDownloadBytes bounds one task's download (the parameters the
	// coordinator sends; default DefaultMaxDownloadBytes): a task declaring
	// more, or sending more than it declares, is refused before the bytes
	// are kept. It also bounds each decoded tensor.
	MaxDownloadBytes int64

	session string
	// ended and endReason are how the coordinator said the federation
	// ended (EndFinished or EndStopped, and a stop's reason).
	ended, endReason string
}

// DefaultMaxDownloadBytes is a site's default bound on one task's
// parameters: the coordinator's default bound on one upload.
const DefaultMaxDownloadBytes = 256 << 20

// ErrUploadRefused wraps an upload the site's own policy refuses (a tensor
// outside what it computed it uploads, a size over its limit, an upload in
// the clear where secure aggregation is required): Run returns it.
var ErrUploadRefused = errors.New("the site refuses to upload")

// ErrDownloadRefused wraps a task whose parameters the site refuses to
// read (over its download limit, or more bytes than declared): Run returns
// it.
var ErrDownloadRefused = errors.New("the site refuses the task's parameters")

// ErrRefused wraps a refusal the site cannot recover from by retrying
// (another protocol version, an unknown site name, a wrong client ID).
var ErrRefused = errors.New("refused by the coordinator")

// ErrCoordinatorFailed is returned when the coordinator ended the
// federation with an error.
var ErrCoordinatorFailed = errors.New("the coordinator failed")

// isCertError reports whether err is a TLS certificate failure (the
// chain rejected by either side): retrying cannot help.
func isCertError(err error) bool {
	msg := err.Error()
	for _, s := range []string{"x509:", "certificate signed by unknown authority", "bad certificate", "certificate required", "unknown certificate", "certificate revoked", "tls: failed to verify"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (r *SiteRunner) version() uint32 {
	if r.Version != 0 {
		return r.Version
	}
	return ProtocolVersion
}

func (r *SiteRunner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// Run serves until the federation is over (nil), ctx ends, the
// coordinator refuses the site for good (an error wrapping ErrRefused), or
// the site refuses a task's parameters or an upload (ErrDownloadRefused,
// ErrUploadRefused).
func (r *SiteRunner) Run(ctx context.Context) error {
	if r.Site == nil {
		return errors.New("site runner: no site")
	}
	var creds credentials.TransportCredentials
	switch {
	case r.TLS != nil:
		creds = credentials.NewTLS(r.TLS)
	case r.Insecure:
		r.logger().Warn("INSECURE: connecting to the coordinator in clear text (--insecure-dev)", "site", r.Name)
		creds = insecure.NewCredentials()
	default:
		return errors.New("site runner: no TLS configuration (Insecure must be asked for explicitly)")
	}
	conn, err := grpc.NewClient(r.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)))
	if err != nil {
		return fmt.Errorf("site %q: %w", r.Name, err)
	}
	defer conn.Close()
	cli := pb.NewFederationClient(conn)
	minB, maxB := r.MinBackoff, r.MaxBackoff
	if minB <= 0 {
		minB = 100 * time.Millisecond
	}
	if maxB < minB {
		maxB = max(5*time.Second, minB)
	}
	backoff := minB
	var b [16]byte
	crand.Read(b[:])
	r.session = hex.EncodeToString(b[:])
	ctx = metadata.AppendToOutgoingContext(ctx, sessionHeader, r.session)
	grace := r.DuplicateGrace
	if grace <= 0 {
		grace = time.Minute
	}
	var dupSince, downSince time.Time
	for {
		err := r.serve(ctx, cli)
		if downSince.IsZero() || errors.Is(err, errProgress) {
			downSince = time.Now()
		}
		if err == nil || errors.Is(err, ErrRefused) || errors.Is(err, ErrUploadRefused) || errors.Is(err, ErrDownloadRefused) {
			return err
		}
		if errors.Is(err, ErrCoordinatorFailed) {
			return err
		}
		if status.Code(errors.Unwrap(err)) == codes.AlreadyExists || status.Code(err) == codes.AlreadyExists {
			if dupSince.IsZero() {
				dupSince = time.Now()
			}
			if time.Since(dupSince) > grace {
				return fmt.Errorf("site %q: %w: %s", r.Name, ErrRefused, status.Convert(err).Message())
			}
		} else {
			dupSince = time.Time{}
		}
		if isCertError(err) {
			return fmt.Errorf("site %q: %w: TLS certificate rejected (revoked with `pfedmma certs revoke`, expired, or issued by another federation's CA): %v", r.Name, ErrRefused, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.logRetry(r.Addr, downSince, err, wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxB)
		if errors.Is(err, errProgress) {
			backoff = minB
		}
	}
}

// logRetry says what the site waits for (the coordinator at addr, which
// may be restarting), since when and for how long so far, and why.
func (r *SiteRunner) logRetry(addr string, since time.Time, err error, wait time.Duration) {
	r.logger().Warn("coordinator unreachable; retrying: waiting for the coordinator (it may be restarting)", "site", r.Name,
		"coordinator", addr, "unreachable_since", since.UTC().Format(time.RFC3339), "unreachable_for", time.Since(since).Round(time.Second).String(),
		"err", err, "next_try_in", wait.Round(time.Millisecond).String())
}

// errProgress marks a session that did some work before it broke, so that
// the next attempt starts with the shortest backoff (madeProgress; its
// message is the cause's alone).
var errProgress = errors.New("session made progress")

// madeProgress is an error of a session that made progress: errors.Is
// finds errProgress and the cause, its message is the cause's.
type madeProgress struct{ error }

func (e madeProgress) Unwrap() error        { return e.error }
func (e madeProgress) Is(target error) bool { return target == errProgress }

// session registers and serves tasks until the federation is over or an
// RPC fails.
func (r *SiteRunner) serve(ctx context.Context, cli pb.FederationClient) error {
	rctx := ctx
	for _, l := range r.Settings {
		rctx = metadata.AppendToOutgoingContext(rctx, settingsHeader, l)
	}
	reg, err := cli.Register(rctx, &pb.RegisterRequest{ProtocolVersion: r.version(), Site: r.Name,
		NumExamples: int64(r.Site.NumExamples()), ClientId: int64(r.Site.ID())}, grpc.WaitForReady(false))
	if err != nil {
		return r.classify(err)
	}
	r.logger().Info("registered", "site", r.Name, "client", reg.ClientId)
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go r.heartbeat(hctx, cli, time.Duration(reg.HeartbeatSeconds*float64(time.Second)))
	for {
		done, err := r.step(ctx, cli)
		if errors.Is(err, ErrCoordinatorFailed) {
			return fmt.Errorf("site %q: %w", r.Name, err)
		}
		if err != nil {
			return madeProgress{r.classify(err)}
		}
		if done {
			r.logger().Info("federation over", "site", r.Name)
			return nil
		}
	}
}

func (r *SiteRunner) classify(err error) error {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.PermissionDenied, codes.InvalidArgument:
		return fmt.Errorf("site %q: %w: %s", r.Name, ErrRefused, status.Convert(err).Message())
	}
	return err
}

func (r *SiteRunner) heartbeat(ctx context.Context, cli pb.FederationClient, every time.Duration) {
	if every <= 0 {
		return
	}
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			if _, err := cli.Heartbeat(ctx, &pb.HeartbeatRequest{ProtocolVersion: r.version(), Site: r.Name}); err != nil && ctx.Err() == nil {
				r.logger().Debug("heartbeat failed", "site", r.Name, "err", err)
			}
		}
	}
}

// step fetches one task and answers it; done reports the end of the
// federation.
func (r *SiteRunner) step(ctx context.Context, cli pb.FederationClient) (done bool, err error) {
	stream, err := cli.GetTask(ctx, &pb.TaskRequest{ProtocolVersion: r.version(), Site: r.Name})
	if err != nil {
		return false, err
	}
	first, err := stream.Recv()
	if err != nil {
		return false, err
	}
	h := first.GetHeader()
	if h == nil {
		return false, errors.New("task stream does not start with a header")
	}
	data, err := r.download(stream, h)
	if err != nil {
		return false, err
	}
	log := r.logger().With("round", h.Round, "site", r.Name)
	switch h.Kind {
	case pb.TaskKind_TASK_KIND_NONE:
		return false, nil
	case pb.TaskKind_TASK_KIND_DONE:
		if why, ok := h.Config[FailureKey]; ok {
			return true, fmt.Errorf("%w: %s", ErrCoordinatorFailed, why)
		}
		r.ended, r.endReason = EndFinished, ""
		if why, ok := h.Config[StoppedKey]; ok {
			r.logger().Warn("the coordinator stopped before the last round: this site ends", "site", r.Name, "reason", why)
			r.ended, r.endReason = EndStopped, why
		}
		return true, nil
	case pb.TaskKind_TASK_KIND_FIT:
		return false, r.fitTask(ctx, cli, h, data, log)
	case pb.TaskKind_TASK_KIND_EVALUATE:
		return false, r.evaluateTask(ctx, cli, h, data, log)
	}
	return false, fmt.Errorf("task of unknown kind %v", h.Kind)
}

// fitTask answers a fit task: it trains on the task's parameters and
// uploads the update, in the clear or by secure aggregation; a task it
// refuses, or an upload this site's policy refuses, is an error.
func (r *SiteRunner) fitTask(ctx context.Context, cli pb.FederationClient, h *pb.TaskHeader, data []byte, log *slog.Logger) error {
	params, rf := decodeBlob(data, h.Params, nil, r.downloadLimits())
	if rf != nil {
		log.Error("task refused", "reason", rf.code, "detail", rf.msg)
		return fmt.Errorf("task %s: %s", h.TaskId, rf.msg)
	}
	cfg, sa, err := splitSecAgg(h.Config)
	if err != nil {
		log.Error("task refused", "err", err)
		return fmt.Errorf("task %s: %w", h.TaskId, err)
	}
	if sa == nil && r.RequireSecureAggregation {
		err := fmt.Errorf("site %q: %w in the clear: fit task %s (round %d) comes without a secure-aggregation session, and this site requires secure aggregation (its policy, or the accepted task's federation.secure_aggregation: true); the coordinator does not run it",
			r.Name, ErrUploadRefused, h.TaskId, h.Round)
		log.Error("task refused", "err", err)
		return err
	}
	t0 := time.Now()
	res, err := r.Site.Fit(ctx, federation.FitIns{Round: int(h.Round), Params: params, Config: cfg})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// the coordinator learns of the failure at the round's
		// deadline; the task is offered again after a pause
		log.Error("fit failed", "err", err)
		return pause(ctx, time.Second)
	}
	log.Info("fit done", "seconds", time.Since(t0).Seconds())
	if err := r.checkUpload(res.Params, h, sa != nil); err != nil {
		log.Error("upload refused by this site", "err", err)
		return err
	}
	if sa != nil {
		return r.secAggUpload(ctx, cli, h, sa, res, log)
	}
	return r.upload(ctx, cli, h, res, log)
}

// evaluateTask answers an evaluation task: it evaluates the task's
// parameters and reports the metrics.
func (r *SiteRunner) evaluateTask(ctx context.Context, cli pb.FederationClient, h *pb.TaskHeader, data []byte, log *slog.Logger) error {
	params, rf := decodeBlob(data, h.Params, nil, r.downloadLimits())
	if rf != nil {
		log.Error("task refused", "reason", rf.code, "detail", rf.msg)
		return fmt.Errorf("task %s: %s", h.TaskId, rf.msg)
	}
	res, err := r.Site.Evaluate(ctx, federation.EvaluateIns{Round: int(h.Round), Params: params, Config: h.Config})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Error("evaluate failed", "err", err)
		return pause(ctx, time.Second)
	}
	rep, err := cli.ReportEval(ctx, &pb.EvalReport{ProtocolVersion: r.version(), Site: r.Name, TaskId: h.TaskId,
		Round: h.Round, NumExamples: int64(res.NumExamples), Metrics: res.Metrics})
	if err != nil {
		return err
	}
	if !rep.Accepted {
		log.Warn("evaluation refused", "reason", rep.Reason)
	}
	return nil
}

func (r *SiteRunner) upload(ctx context.Context, cli pb.FederationClient, h *pb.TaskHeader, res federation.FitRes, log *slog.Logger) error {
	codec, err := compress.Parse(h.UploadCompression)
	if err != nil {
		// a coordinator asking for an encoding this build lacks: retrying
		// cannot help
		return fmt.Errorf("site %q: %w: task %s: upload_compression: %w", r.Name, ErrRefused, h.TaskId, err)
	}
	data, blob, err := encodeMessage(res.Params, codec)
	if err != nil {
		log.Error("upload not encodable", "err", err)
		return nil
	}
	if lim, n := r.MaxUploadBytes, codec.Bytes(res.Params); lim > 0 && n > lim {
		enc := string(codec)
		if codec == compress.None {
			enc = "f32"
		}
		return fmt.Errorf("site %q: %w: task %s: the update weighs %d bytes encoded as %s, over this site's limit of %d bytes (--max-upload-mib)",
			r.Name, ErrUploadRefused, h.TaskId, n, enc, lim)
	}
	st, err := cli.UploadUpdate(ctx)
	if err != nil {
		return err
	}
	n := res.NumExamples
	if n == 0 {
		n = r.Site.NumExamples()
	}
	hdr := &pb.UpdateHeader{ProtocolVersion: r.version(), Site: r.Name, TaskId: h.TaskId, Round: h.Round,
		NumExamples: int64(n), Metrics: res.Metrics, Params: blob}
	if err := st.Send(&pb.UpdateChunk{Part: &pb.UpdateChunk_Header{Header: hdr}}); err != nil {
		return err
	}
	for _, c := range chunks(data) {
		if err := st.Send(&pb.UpdateChunk{Part: &pb.UpdateChunk_Data{Data: c}}); err != nil {
			if err == io.EOF {
				break // the server answered early (a refusal): read it below
			}
			return err
		}
	}
	rep, err := st.CloseAndRecv()
	if err != nil {
		return err
	}
	if !rep.Accepted {
		log.Warn("upload refused", "reason", rep.Reason)
		return nil
	}
	log.Info("upload accepted", "bytes", len(data))
	return nil
}

// download reads a task's parameter bytes: at most what the header
// declares, and the header may declare at most MaxDownloadBytes.
func (r *SiteRunner) download(stream grpc.ServerStreamingClient[pb.TaskChunk], h *pb.TaskHeader) ([]byte, error) {
	lim := r.downloadLimits().MaxUploadBytes
	size := h.GetParams().GetSize()
	if size < 0 || size > lim {
		return nil, fmt.Errorf("site %q: %w: task %s: the coordinator declares %d bytes of parameters, over this site's download limit of %d bytes (--max-download-mib): refused before reading them", r.Name, ErrDownloadRefused, h.TaskId, size, lim)
	}
	data := make([]byte, 0, size)
	for {
		c, err := stream.Recv()
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		d := c.GetData()
		if c.GetHeader() != nil || int64(len(data))+int64(len(d)) > size {
			return nil, fmt.Errorf("site %q: %w: task %s: the coordinator sends more than the %d bytes of parameters it declares: refused", r.Name, ErrDownloadRefused, h.TaskId, size)
		}
		data = append(data, d...)
	}
}

// downloadLimits bound what a task's parameters may hold: MaxDownloadBytes
// in all and in any one decoded tensor.
func (r *SiteRunner) downloadLimits() Limits {
	lim := cmp.Or(r.MaxDownloadBytes, DefaultMaxDownloadBytes)
	return Limits{MaxTensorBytes: lim, MaxUploadBytes: lim}.withDefaults()
}

// checkUpload refuses an update outside what the site computed it uploads
// (r.Uploads: a name it does not list, another shape) and, under secure
// aggregation, a masked vector over r.MaxUploadBytes (the clear upload's
// size is checked once encoded).
func (r *SiteRunner) checkUpload(params tensor.Named, h *pb.TaskHeader, masked bool) error {
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("site %q: %w: task %s: %s", r.Name, ErrUploadRefused, h.TaskId, fmt.Sprintf(format, a...))
	}
	if r.Uploads != nil {
		for _, name := range sortedNames(params) {
			want, ok := r.Uploads[name]
			switch {
			case !ok:
				return refuse("tensor %q is not among the tensors this site computed it uploads for the accepted task (%s)", name, strings.Join(slices.Sorted(maps.Keys(r.Uploads)), ", "))
			case !slices.Equal(params[name].Shape, want):
				return refuse("tensor %q has shape %v, but this site computed %v for the accepted task", name, params[name].Shape, want)
			}
		}
	}
	if masked && r.MaxUploadBytes > 0 {
		var n int64
		for _, t := range params {
			n += int64(len(t.Data))
		}
		if b := 8 * (n + 1); b > r.MaxUploadBytes {
			return refuse("the masked update weighs %d bytes (8 a value, %d values and the weight), over this site's limit of %d bytes (--max-upload-mib)", b, n, r.MaxUploadBytes)
		}
	}
	return nil
}

func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
