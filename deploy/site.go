package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pfedmma/pfedmma/certs"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/federation"
	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/transport"
)

// SiteConfig is one site of a federation over the network (`pfedmma
// site`). The experiment comes from the coordinator (the task it sends at
// registration); the site keeps its data, model, state and compute
// settings.
type SiteConfig struct {
	// Experiment, when set, is the site's own configuration (a scripted
	// setup's experiment flags): the coordinator refuses the site, naming
	// the keys, unless it is the coordinator's. Nil: the site runs the
	// coordinator's task.
	Experiment *config.Experiment
	// Local are the site's site-local overrides (config.IsSiteLocal:
	// threads=…, cache.…=…) applied to the coordinator's task.
	Local []string
	// Model is the site's checkpoint, resolved (the embedded model's folder
	// when ModelArg is empty); its SHA-256 must be the coordinator's.
	// ModelArg is the path as given (--model; empty: the embedded model).
	// Vocab is the site's vocabulary (empty: the one beside the model).
	Model, ModelArg, Vocab string
	// Policy refuses tasks the site does not accept.
	Policy SitePolicy
	// Server is the coordinator's address; Name the site's certificate CN
	// (the i-th site of `certs init --sites` is client i).
	Server, Name string
	Certs        string
	Insecure     bool
	// Sites, with Insecure, names the federation's sites in client order
	// (with certificates they come from Certs' sites.txt).
	Sites []string
	// Data is the dataset folder, or "world" (generated).
	Data string
	// State holds the site's private state, metrics and final parameters
	// (default site-NAME).
	State string
	// DuplicateGrace is how long the site keeps retrying while the
	// coordinator says another process already serves it (a restarted
	// site's old session expiring) before it gives up (0: one minute).
	DuplicateGrace time.Duration
	Logger         *slog.Logger
}

// SiteResult is what Site did: the site's client number and its state
// folder.
type SiteResult struct {
	ID    int
	State string
	// Over, when set, is the record of a federation that had already
	// finished (the site's state folder holds it, for the same
	// coordinator): the site did nothing. OverFile is that record's path.
	Over     *transport.FederationOver
	OverFile string
}

// TaskFile is the coordinator's task as a site received it, kept in the
// site's state folder.
const TaskFile = "task.yaml"

// Site runs one site until the federation ends: it receives the
// coordinator's task, checks it against the site's policy and model
// (refusals are sent to the coordinator and returned as *TaskRefusal),
// then serves the client it builds from it (SiteFromTask).
func Site(ctx context.Context, c SiteConfig) (*SiteResult, error) {
	if c.Server == "" || c.Name == "" || c.Data == "" || (c.Certs == "" && !c.Insecure) {
		return nil, errors.New("--server, --certs, --name and --data are required")
	}
	if c.State == "" {
		c.State = "site-" + c.Name
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := checkData(c.Data); err != nil {
		return nil, err
	}
	if c.Experiment != nil { // experiment flags: --data checked before any connection
		if err := siteData(c.Experiment.Clone(), c.Data); err != nil {
			return nil, err
		}
	}
	id, err := siteID(c)
	if err != nil {
		return nil, err
	}
	if over, path, err := c.federationOver(); err != nil {
		return nil, err
	} else if over != nil {
		c.logOver(over, path)
		return &SiteResult{ID: id, State: c.State, Over: over, OverFile: path}, nil
	}
	rt, err := ReceiveTask(ctx, c, id)
	if err != nil {
		return nil, err
	}
	return SiteFromTask(ctx, c, rt.Experiment, rt.Fingerprint, rt.Model, id)
}

// ReceivedTask is a coordinator's task as a site accepted it.
type ReceivedTask struct {
	// Experiment is what the site runs: the coordinator's experiment with
	// the site's data, model and site-local settings.
	Experiment *config.Experiment
	// Fingerprint is the coordinator's, sent with every round.
	Fingerprint string
	// Model is the identity of the site's model (the coordinator's).
	Model ModelID
}

// identify returns the site's model identity and the settings it
// compares with the coordinator's task (its own configuration's, when it
// has one); an unreadable model is an error naming --model.
func (c SiteConfig) identify() (ModelID, []string, error) {
	modelID, err := IdentifyModel(c.Model, c.Vocab)
	if err != nil {
		if c.ModelArg != "" {
			return ModelID{}, nil, fmt.Errorf("--model %s: %w", c.ModelArg, err)
		}
		return ModelID{}, nil, err
	}
	var own []string
	if c.Experiment != nil {
		own = taskSettings(c.Experiment, modelID)
	}
	return modelID, own, nil
}

// ReceiveTask asks the coordinator for its task as site c.Name (client
// id), checks it against the site's policy, model and data, and keeps it
// in c.State/task.yaml. A refusal (*TaskRefusal) or a task the site cannot
// run is logged, sent to the coordinator (which logs it naming the site)
// and returned. A process hosting several clients calls it once and
// SiteFromTask per client.
func ReceiveTask(ctx context.Context, c SiteConfig, id int) (*ReceivedTask, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	modelID, own, err := c.identify()
	if err != nil {
		return nil, err
	}
	tc := c.transport()
	task, err := transport.FetchTask(ctx, tc, id, own)
	var e *config.Experiment
	if err == nil {
		e, err = AcceptTask(task, c, modelID)
	} else if !errors.Is(err, transport.ErrMalformedTask) {
		return nil, err
	}
	if err == nil {
		err = siteData(e, c.Data)
	}
	if err == nil {
		err = keepTask(c.State, task)
	}
	if err != nil {
		return nil, c.refuseTask(ctx, id, err)
	}
	c.Logger.Info("task accepted", "site", c.Name, "client", id, "fingerprint", task.Fingerprint, "methods", e.Methods, "rounds", e.Federation.Rounds)
	return &ReceivedTask{Experiment: e, Fingerprint: task.Fingerprint, Model: modelID}, nil
}

// transport is the site's connection settings.
func (c SiteConfig) transport() transport.SiteConfig {
	return transport.SiteConfig{Addr: c.Server, CertsDir: c.Certs, Name: c.Name, Insecure: c.Insecure, DuplicateGrace: c.DuplicateGrace, Logger: c.Logger}
}

// federationOver returns the record in site c's state folder of its
// federation's end (transport.ReadOver) when the federation finished, and
// its path; a stop (the coordinator, restarted with the same flags,
// resumes) is logged, and the site waits for the coordinator.
func (c SiteConfig) federationOver() (*transport.FederationOver, string, error) {
	tc := c.transport()
	tc.StateDir = filepath.Join(c.State, "state")
	path := filepath.Join(tc.StateDir, transport.OverFile)
	o, err := transport.ReadOver(tc)
	if err != nil || o == nil {
		return nil, path, err
	}
	if !o.Finished() {
		c.Logger.Warn("the coordinator stopped this federation before its last round; waiting for it to be restarted with the same flags",
			"site", c.Name, "coordinator", o.Server, "stopped_at", o.At.Format(time.RFC3339), "reason", o.Reason, "record", path)
		return nil, path, nil
	}
	return o, path, nil
}

// logOver says that site c does nothing: its federation finished.
func (c SiteConfig) logOver(o *transport.FederationOver, path string) {
	c.Logger.Info("this site's federation is over: nothing to do (to join a new federation give another --state, or remove the record)",
		"site", c.Name, "coordinator", o.Server, "finished_at", o.At.Format(time.RFC3339), "record", path)
}

// keepTask writes the task to state/task.yaml; a state folder that holds
// another experiment's state (another fingerprint) is refused, not
// overwritten.
func keepTask(state string, task *transport.Task) error {
	path := filepath.Join(state, TaskFile)
	if old, err := os.ReadFile(path); err == nil {
		if fp := taskFingerprint(old); fp != "" && fp != task.Fingerprint {
			if entries, _ := os.ReadDir(filepath.Join(state, "state")); len(entries) > 0 {
				return fmt.Errorf("--state %s holds the state of another experiment (fingerprint %s, the coordinator's is %s): give another --state folder, or remove this one to start afresh", state, fp, task.Fingerprint)
			}
		}
	}
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, task.Experiment)
}

// taskFingerprint reads the "# fingerprint: …" line of a task file.
func taskFingerprint(data []byte) string {
	for _, l := range strings.Split(string(data), "\n") {
		if fp, ok := strings.CutPrefix(l, "# fingerprint: "); ok {
			return strings.TrimSpace(fp)
		}
	}
	return ""
}

// SiteFromTask builds client id of experiment e (the coordinator's task as
// AcceptTask returns it; fingerprint and model are the task's) and
// serves it as site c until the federation ends. Its private state stays
// in State/state; its evaluations go to State/metrics.jsonl and, at the
// end, what it keeps to State/sites/<method>/client_NNN.safetensors, the
// file `pfedmma run` writes for that client.
func SiteFromTask(ctx context.Context, c SiteConfig, e *config.Experiment, fingerprint string, model ModelID, id int) (*SiteResult, error) {
	o, err := experiment.FromConfig(e, c.Model, e.Seed, c.State)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.State, 0o755); err != nil {
		return nil, err
	}
	f, err := experiment.PrepareFederated(ctx, o, id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	uploads, err := c.acceptUploads(e, f)
	if err != nil {
		return nil, c.refuseTask(ctx, id, err)
	}
	logger := siteLogger(c.Logger)
	state := filepath.Join(c.State, "state")
	sc := &siteClient{Client: f.Client(id), fingerprint: fingerprint, metrics: filepath.Join(c.State, "metrics.jsonl")}
	tc := c.transport()
	tc.Logger, tc.StateDir, tc.Settings = logger, state, taskSettings(e, model)
	c.sitePolicy(&tc, e, uploads)
	if err := transport.RunSite(ctx, tc, sc); err != nil {
		return nil, err
	}
	// a site restarted after its last task holds its initial state in
	// memory: keep what it saved
	if err := federation.NewSite(f.Client(id), state).Restore(); err != nil {
		return nil, err
	}
	if err := f.WriteSite(c.State, id, map[string]string{"site": c.Name}); err != nil {
		return nil, err
	}
	return &SiteResult{ID: id, State: c.State}, nil
}

// checkData checks --data before anything is asked of the coordinator.
func checkData(data string) error {
	if data == "world" {
		return nil
	}
	if fi, err := os.Stat(data); err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--data %s: not a folder (give the dataset's folder, or world)", data)
	}
	return nil
}

// siteData points e's dataset at the site's --data (a folder, or world).
func siteData(e *config.Experiment, data string) error {
	if data == "world" {
		if e.Dataset.Name != "world" {
			return fmt.Errorf("--data world but the configuration's dataset is %q", e.Dataset.Name)
		}
		return nil
	}
	if fi, err := os.Stat(data); err != nil {
		return fmt.Errorf("--data %s: %w", data, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("--data %s: not a folder (give the dataset's folder, or world)", data)
	}
	if e.Dataset.Name == "world" {
		return fmt.Errorf("--data %s but the experiment's dataset is world, which is generated and reads no folder: pass --data world", data)
	}
	e.Dataset.Root = data
	return nil
}

// siteClient checks that the coordinator runs this site's configuration
// (the fingerprint handshake) and records the site's evaluations.
type siteClient struct {
	federation.Client
	fingerprint, metrics string
}

func (s *siteClient) Fit(ctx context.Context, ins federation.FitIns) (federation.FitRes, error) {
	if fp, ok := ins.Config[FingerprintKey]; ok && fp != s.fingerprint {
		return federation.FitRes{}, fmt.Errorf("the coordinator's configuration (fingerprint %s) differs from the task this site received (%s): the coordinator was restarted with another experiment; restart the site", fp, s.fingerprint)
	}
	return s.Client.Fit(ctx, ins)
}

func (s *siteClient) Evaluate(ctx context.Context, ins federation.EvaluateIns) (federation.EvaluateRes, error) {
	res, err := s.Client.Evaluate(ctx, ins)
	if err != nil {
		return res, err
	}
	line, err := json.Marshal(map[string]any{"round": ins.Round, "metrics": federation.Metrics(res.Metrics)})
	if err != nil {
		return res, err
	}
	fh, err := os.OpenFile(s.metrics, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return res, err
	}
	defer fh.Close()
	_, err = fh.Write(append(line, '\n'))
	return res, err
}

// siteID is the site's client number: its place in the certificates
// folder's sites.txt, or with --insecure-dev in --sites.
func siteID(c SiteConfig) (int, error) {
	switch {
	case c.Insecure && c.Certs != "":
		return 0, errors.New("--insecure-dev and --certs exclude each other (--insecure-dev connects in clear text and would ignore the certificates; name the sites with --sites)")
	case c.Insecure && len(c.Sites) == 0:
		return 0, errors.New("--insecure-dev needs --sites NAME,… as the coordinator's (client i is the i-th name)")
	case !c.Insecure && len(c.Sites) > 0:
		return 0, errors.New("--sites is for --insecure-dev only (with certificates the sites are the certificates folder's sites.txt)")
	case c.Insecure:
		i := slices.Index(c.Sites, c.Name)
		if i < 0 {
			return 0, fmt.Errorf("--name %q is not among --sites %v", c.Name, c.Sites)
		}
		return i, nil
	}
	return certs.SiteID(c.Certs, c.Name)
}
