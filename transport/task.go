package transport

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/transport/pb"
)

// ReasonTaskRefused counts sites whose policy refused the coordinator's
// task (RegisterRequest.task_refused).
const ReasonTaskRefused = "task_refused"

// ErrMalformedTask wraps the errors of a task that TaskFromProto refuses.
var ErrMalformedTask = errors.New("malformed task from the coordinator")

// MaxTaskBytes bounds the experiment YAML of a task (a configuration is at
// most 1 MiB, config.MaxFileBytes).
const MaxTaskBytes = 1 << 20

// Task is what a coordinator sends a site at registration so that the site
// builds its client from it (`pfedmma site` without experiment flags).
type Task struct {
	// Experiment is the coordinator's resolved experiment as YAML without
	// the site-local settings (config.Experiment.TaskYAML).
	Experiment []byte
	// ModelSHA256 identifies the model (64 hex digits): a site never
	// downloads weights, it must hold a model with this hash.
	ModelSHA256 string
	// VocabSHA256 identifies the tokenizer's vocabulary (64 hex digits).
	VocabSHA256 string
	// Fingerprint is the experiment's fingerprint, sent with every round.
	Fingerprint string
	// UploadBytes is what one upload of the method's shared tensors
	// weighs (encoded as federation.compress says), for the site's
	// --max-upload-mib.
	UploadBytes int64
}

// toProto is the wire form of t.
func (t *Task) toProto() *pb.TaskExperiment {
	return &pb.TaskExperiment{ExperimentYaml: t.Experiment, ModelSha256: t.ModelSHA256, VocabSha256: t.VocabSHA256, Fingerprint: t.Fingerprint, UploadBytes: t.UploadBytes}
}

// TaskFromProto checks a task received from the coordinator; errors name
// the task's field.
func TaskFromProto(m *pb.TaskExperiment) (*Task, error) {
	if m == nil {
		return nil, errors.New("the coordinator's registration reply holds no task: it predates `pfedmma site` without experiment flags; start the site with the coordinator's --config/--preset/--set")
	}
	var errs []error
	if len(m.ExperimentYaml) == 0 {
		errs = append(errs, errors.New("task field experiment_yaml: empty"))
	} else if len(m.ExperimentYaml) > MaxTaskBytes {
		errs = append(errs, fmt.Errorf("task field experiment_yaml: %d bytes, at most %d", len(m.ExperimentYaml), MaxTaskBytes))
	}
	if err := checkSHA256(m.ModelSha256); err != nil {
		errs = append(errs, fmt.Errorf("task field model_sha256: %w", err))
	}
	if err := checkSHA256(m.VocabSha256); err != nil {
		errs = append(errs, fmt.Errorf("task field vocab_sha256: %w", err))
	}
	if err := checkSHA256(m.Fingerprint); err != nil {
		errs = append(errs, fmt.Errorf("task field fingerprint: %w", err))
	}
	if m.UploadBytes <= 0 {
		errs = append(errs, fmt.Errorf("task field upload_bytes: %d, want a positive size", m.UploadBytes))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrMalformedTask, errors.Join(errs...))
	}
	return &Task{Experiment: m.ExperimentYaml, ModelSHA256: m.ModelSha256, VocabSHA256: m.VocabSha256, Fingerprint: m.Fingerprint, UploadBytes: m.UploadBytes}, nil
}

// checkSHA256 accepts 64 lower-case hex digits.
func checkSHA256(s string) error {
	if b, err := hex.DecodeString(s); err != nil || len(b) != 32 || strings.ToLower(s) != s {
		return fmt.Errorf("%q is not a SHA-256 (64 lower-case hex digits)", s)
	}
	return nil
}

// answerTask answers a RegisterRequest that asks for the task or refuses
// it; it registers nothing.
func (s *Server) answerTask(st *siteState, req *pb.RegisterRequest) (*pb.RegisterReply, error) {
	if why := req.TaskRefused; why != "" {
		if len(why) > 2048 {
			why = why[:2048] + "…"
		}
		s.metrics.Refused.WithLabelValues(ReasonTaskRefused).Inc()
		s.log.Error("the site refused the task", "site", st.name, "reason", why)
		s.event(s.round(), st.name, "refused", "the site refused the task: "+why)
		return &pb.RegisterReply{ProtocolVersion: ProtocolVersion, ClientId: int64(st.id)}, nil
	}
	if s.cfg.Task == nil {
		return nil, status.Error(codes.FailedPrecondition, "this coordinator sends no task: start the site with the coordinator's --config/--preset/--set")
	}
	s.log.Info("task sent", "site", st.name, "client", st.id)
	return &pb.RegisterReply{ProtocolVersion: ProtocolVersion, ClientId: int64(st.id), Task: s.cfg.Task.toProto()}, nil
}

// dial connects to the coordinator as site cfg.Name.
func (cfg SiteConfig) dial() (*grpc.ClientConn, error) {
	var creds credentials.TransportCredentials
	if cfg.Insecure {
		creds = insecure.NewCredentials()
	} else {
		host := cfg.ServerName
		if host == "" {
			h, _, err := net.SplitHostPort(cfg.Addr)
			if err != nil {
				return nil, fmt.Errorf("site %q: address %q: %w", cfg.Name, cfg.Addr, err)
			}
			host = h
		}
		t, err := certs.SiteTLS(cfg.CertsDir, cfg.Name, host)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(t)
	}
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("site %q: %w", cfg.Name, err)
	}
	return conn, nil
}

// FetchTask asks the coordinator for the task of site cfg.Name (client
// clientID), retrying with backoff while the coordinator is unreachable.
// settings, when given, are the site's own resolved configuration (a site
// started with experiment flags): the coordinator refuses the site, naming
// the keys, when they differ from its own. A refusal for good wraps
// ErrRefused; a malformed task is an error naming its field.
func FetchTask(ctx context.Context, cfg SiteConfig, clientID int, settings []string) (*Task, error) {
	conn, err := cfg.dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	cli := pb.NewFederationClient(conn)
	r := &SiteRunner{Name: cfg.Name, Logger: cfg.Logger}
	minB, maxB := cfg.MinBackoff, cfg.MaxBackoff
	if minB <= 0 {
		minB = 100 * time.Millisecond
	}
	if maxB < minB {
		maxB = max(5*time.Second, minB)
	}
	backoff := minB
	rctx := ctx
	for _, l := range settings {
		rctx = metadata.AppendToOutgoingContext(rctx, settingsHeader, l)
	}
	since := time.Now()
	for {
		reply, err := cli.Register(rctx, &pb.RegisterRequest{ProtocolVersion: ProtocolVersion, Site: cfg.Name, ClientId: int64(clientID), TaskWanted: true})
		if err == nil {
			return TaskFromProto(reply.Task)
		}
		if err := r.classify(err); errors.Is(err, ErrRefused) {
			return nil, err
		}
		if isCertError(err) {
			return nil, fmt.Errorf("site %q: %w: TLS certificate rejected (revoked with `pfedmma certs revoke`, expired, or issued by another federation's CA): %v", cfg.Name, ErrRefused, err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		r.logRetry(cfg.Addr, since, err, wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(2*backoff, maxB)
	}
}

// RefuseTask tells the coordinator that site cfg.Name refuses its task and
// why, so that the refusal is logged on both sides. It tries once (the
// site exits with the reason either way).
func RefuseTask(ctx context.Context, cfg SiteConfig, clientID int, reason string) error {
	conn, err := cfg.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pb.NewFederationClient(conn).Register(ctx, &pb.RegisterRequest{ProtocolVersion: ProtocolVersion, Site: cfg.Name,
		ClientId: int64(clientID), TaskRefused: reason})
	return err
}
