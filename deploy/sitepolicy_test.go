package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pfedmma/pfedmma/dashboard"
	"github.com/pfedmma/pfedmma/experiment"
	"github.com/pfedmma/pfedmma/transport"
)

// rogueServer is the project's coordinator server sending task (which the
// test tampered with) to sites s0 and s1; its event log records what the
// sites refuse.
func rogueServer(t *testing.T, task *transport.Task) (string, *dashboard.EventLog) {
	t.Helper()
	events := &dashboard.EventLog{}
	srv, err := transport.NewServer(transport.ServerConfig{Sites: []string{"s0", "s1"}, Insecure: true, Spec: transport.Spec{"w": {2}}, Task: task,
		Events: events, PollWait: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC().Serve(lis)
	t.Cleanup(srv.GRPC().Stop)
	return lis.Addr().String(), events
}

// refusedEvent reports whether the coordinator recorded site's refusal
// holding want.
func refusedEvent(events *dashboard.EventLog, site, want string) bool {
	for _, ev := range events.Recent() {
		if ev.Kind == "refused" && ev.Site == site && strings.Contains(ev.Message, want) {
			return true
		}
	}
	return false
}

// TestTaskCannotReachSiteMachine (issue 34, finding 3): a coordinator that
// appends the site's own keys to its task — the vocabulary (/etc/passwd),
// threads, the cache's memory and spill folder, the model, the data folder,
// or a YAML merge key carrying them — is refused naming the key, and the
// coordinator hears of it; the site loads the vocabulary whose hash it
// compared, never the task's.
func TestTaskCannotReachSiteMachine(t *testing.T) {
	id := ModelID{Weights: strings.Repeat("1a", 32), Vocab: strings.Repeat("c3", 32)}
	_, honest := coordinatorTaskID(t, id)
	site := SiteConfig{Data: "world", Vocab: "/site/vocab.json"}
	e, err := AcceptTask(honest, site, id)
	if err != nil {
		t.Fatalf("the honest task: %v", err)
	}
	if e.Vocab != site.Vocab || e.Model != "" {
		t.Errorf("the site loads vocabulary %q and model %q; want its own, hashed, %q and the embedded model", e.Vocab, e.Model, site.Vocab)
	}
	tamper := func(yaml string) *transport.Task {
		task := *honest
		task.Experiment = append([]byte(string(honest.Experiment)), yaml...)
		return &task
	}
	for _, c := range []struct{ yaml, want string }{
		{"vocab: /etc/passwd\n", "vocab (line"},
		{"threads: 4096\n", "threads (line"},
		{"cache:\n  memory_mib: 16777216\n  spill_dir: /site/secrets\n", "cache (line"},
		{"model: /etc/passwd\n", "model (line"},
		{"<<: {threads: 4096}\n", "a YAML merge key"},
	} {
		_, err := AcceptTask(tamper(c.yaml), site, id)
		var r *TaskRefusal
		if !errors.As(err, &r) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "never the coordinator's") {
			t.Errorf("a task appending %q: %v; want a refusal naming %q", c.yaml, err, c.want)
		}
	}
	root := *honest
	root.Experiment = []byte(strings.Replace(string(honest.Experiment), "\ndataset:\n", "\ndataset:\n  root: /site/other-patients\n", 1))
	if _, err := AcceptTask(&root, SiteConfig{Data: t.TempDir()}, id); err == nil || !strings.Contains(err.Error(), "dataset.root (line") {
		t.Errorf("a task setting dataset.root: %v; want a refusal naming it", err)
	}

	// through the project's coordinator server: the site refuses before
	// reading anything, and the coordinator records the refusal
	model := smallModel(t)
	mid, err := IdentifyModel(model, "")
	if err != nil {
		t.Fatal(err)
	}
	_, good := coordinatorTaskID(t, mid)
	bad := *good
	bad.Experiment = append([]byte(string(good.Experiment)), "vocab: /etc/passwd\nthreads: 4096\n"...)
	addr, events := rogueServer(t, &bad)
	c := SiteConfig{Server: addr, Name: "s0", Insecure: true, Sites: []string{"s0", "s1"}, Data: "world", Model: model, ModelArg: model,
		State: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := ReceiveTask(ctx, c, 0); err == nil || !strings.Contains(err.Error(), "vocab (line") || !strings.Contains(err.Error(), "threads (line") {
		t.Errorf("the rogue coordinator's task: %v; want a refusal naming vocab and threads", err)
	}
	if !refusedEvent(events, "s0", "vocab (line") {
		t.Errorf("the coordinator did not record the refusal: %+v", events.Recent())
	}
	if _, err := os.Stat(filepath.Join(c.State, TaskFile)); err == nil {
		t.Error("the refused task was kept as the site's task")
	}
}

// TestSitePolicyRefuses (issue 34, finding 1): a policy's pinned sharing
// settings, required secure aggregation and minimum of participants refuse
// a task that breaks them, naming the setting; a task within them is
// accepted.
func TestSitePolicyRefuses(t *testing.T) {
	id := ModelID{Weights: strings.Repeat("1a", 32), Vocab: strings.Repeat("c3", 32)}
	_, otp := coordinatorTaskID(t, id, "methods=[fedotp]", "fedotp.num_prompt=2", "fedotp.avg_prompt=2")
	_, secure := coordinatorTaskID(t, id, "federation.secure_aggregation=true")
	file := SitePolicy{Settings: map[string]string{"fedotp.avg_prompt": "1"}, File: "site.yaml", FileKeys: []string{"settings"}}
	for _, c := range []struct {
		name   string
		task   *transport.Task
		policy SitePolicy
		want   string // "" accepted
	}{
		{"pinned avg_prompt", otp, file, "the task sets fedotp.avg_prompt to 2; the policy site.yaml pins it to 1"},
		{"pinned to the task's value", otp, SitePolicy{Settings: map[string]string{"fedotp.avg_prompt": "2"}}, ""},
		{"a pin for a method not run", secure, file, ""},
		{"a pin on the federation", otp, SitePolicy{Settings: map[string]string{"federation.compress": "fp16"}}, "federation.compress"},
		{"secure aggregation required", otp, SitePolicy{RequireSecureAggregation: true}, "federation.secure_aggregation is false and --require-secure-aggregation requires"},
		{"secure aggregation present", secure, SitePolicy{RequireSecureAggregation: true}, ""},
		{"too few participants", secure, SitePolicy{MinParticipants: 4}, "3 clients, fewer than --min-participants 4"},
		{"enough participants", secure, SitePolicy{MinParticipants: 3}, ""},
	} {
		_, err := AcceptTask(c.task, SiteConfig{Data: "world", Policy: c.policy}, id)
		var r *TaskRefusal
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (!errors.As(err, &r) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want a refusal naming %q", c.name, err, c.want)
		}
	}
}

// TestSitePolicyFile: a policy file sets the policy's keys; an unknown
// key, a setting that is no setting or is the site's own, or a bad value
// is an error naming the file and the key.
func TestSitePolicyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := write("methods: [fedotp, pfedmma]\nsettings:\n  fedotp.avg_prompt: 1\nmax_upload_mib: 0.5\nmax_download_mib: 64\nrequire_secure_aggregation: true\nmin_participants: 3\n")
	var p SitePolicy
	keys, err := LoadSitePolicy(path, &p)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 6 || strings.Join(p.AcceptMethods, ",") != "fedotp,pfedmma" || p.Settings["fedotp.avg_prompt"] != "1" || p.MaxUploadMiB != 0.5 ||
		p.MaxDownloadMiB != 64 || !p.RequireSecureAggregation || p.MinParticipants != 3 || p.File != path {
		t.Errorf("policy %+v, keys %v", p, keys)
	}
	for _, c := range []struct{ body, want string }{
		{"max_upload: 1\n", "max_upload: line 1: unknown key"},
		{"settings:\n  fedotp.avg_promt: 1\n", "settings: line 1: fedotp.avg_promt"},
		{"settings:\n  vocab: /etc/passwd\n", "vocab is the site's own setting"},
		{"methods: [fedopt]\n", `"fedopt" is no method`},
		{"max_upload_mib: -1\n", "max_upload_mib: line 1"},
		{"require_secure_aggregation: maybe\n", "require_secure_aggregation: line 1"},
		{"min_participants: 2\nmin_participants: 3\n", "min_participants: line 2: given twice"},
	} {
		var p SitePolicy
		if _, err := LoadSitePolicy(write(c.body), &p); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("policy %q: %v; want an error naming the file and %q", c.body, err, c.want)
		}
	}
}

// TestSiteComputesUploads (issue 34, finding 1): a coordinator that
// declares a 1-byte upload for FedOTP with avg_prompt=2 (its method
// uploads both prompts) is refused by a site accepting fedotp with
// --max-upload-mib 0.001: the site computes what it uploads from the
// method's code and the task's settings, prints it and keeps it in
// uploads.json, and the coordinator hears of the refusal.
func TestSiteComputesUploads(t *testing.T) {
	model := smallModel(t)
	mid, err := IdentifyModel(model, "")
	if err != nil {
		t.Fatal(err)
	}
	e := tinyConfig(t, "methods=[fedotp]", "fedotp.num_prompt=2", "fedotp.avg_prompt=2", "fedotp.n_ctx=4", "federation.rounds=1")
	task, err := serveTask(e, mid, map[string][]int{"ctx": {1}})
	if err != nil {
		t.Fatal(err)
	}
	task.UploadBytes = 1 // the coordinator's word
	addr, events := rogueServer(t, task)
	c := SiteConfig{Server: addr, Name: "s0", Insecure: true, Sites: []string{"s0", "s1"}, Data: "world", Model: model, ModelArg: model,
		State: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Policy: SitePolicy{AcceptMethods: []string{"fedotp"}, MaxUploadMiB: 0.001}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, err = Site(ctx, c)
	var r *TaskRefusal
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "over --max-upload-mib 0.001") {
		t.Fatalf("the site's answer: %v; want a refusal over --max-upload-mib 0.001", err)
	}
	b, err := os.ReadFile(filepath.Join(c.State, UploadsFile))
	if err != nil {
		t.Fatal(err)
	}
	var l UploadList
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	// the oracle: FedOTP shares its first avg_prompt prompts of n_ctx
	// tokens, each as wide as the text tower (64 in the test model)
	if l.Method != "fedotp" || len(l.Tensors) != 1 || l.Tensors[0].DType != "F32" || l.Values != 2*4*64 || l.Bytes != 4*2*4*64 || l.Encoding != "f32" {
		t.Errorf("uploads.json: %s; want fedotp's 2×4×64 shared prompts, %d bytes", b, 4*2*4*64)
	}
	if !refusedEvent(events, "s0", "over --max-upload-mib 0.001") {
		t.Errorf("the coordinator did not record the refusal: %+v", events.Recent())
	}
	// the same computation under secure aggregation counts 8 bytes a value
	// and the weight
	secure := e.Clone()
	secure.Federation.SecureAggregation = true
	ls, err := computeUploads(secure, "fedotp", map[string][]int{"ctx": {2, 4, 64}})
	if err != nil || ls.Bytes != 8*(2*4*64+1) || ls.Encoding != "masked" {
		t.Errorf("masked uploads: %+v, %v; want %d bytes", ls, err, 8*(2*4*64+1))
	}
}

// TestSitePolicyReachesTransport: the site's transport carries what it
// computed it uploads, its limits and its minimum of participants, and
// requires secure aggregation when its policy or the accepted task asks
// for it (issue 34, finding 2).
func TestSitePolicyReachesTransport(t *testing.T) {
	e := tinyConfig(t)
	spec := transport.Spec{"w": {2}}
	for _, c := range []struct {
		policy  SitePolicy
		secure  bool
		require bool
	}{{SitePolicy{}, false, false}, {SitePolicy{}, true, true}, {SitePolicy{RequireSecureAggregation: true}, false, true}} {
		e.Federation.SecureAggregation = c.secure
		c.policy.MaxUploadMiB, c.policy.MaxDownloadMiB, c.policy.MinParticipants = 0.5, 2, 3
		var tc transport.SiteConfig
		SiteConfig{Policy: c.policy}.sitePolicy(&tc, e, spec)
		if tc.RequireSecureAggregation != c.require || tc.MaxUploadBytes != 1<<19 || tc.MaxDownloadBytes != 2<<20 || tc.MinParticipants != 3 || len(tc.Uploads) != 1 {
			t.Errorf("policy %+v, task secure_aggregation %v: transport %+v", c.policy, c.secure, tc)
		}
	}
}

// TestSiteRefusesClearUploadUnderSecureTask (issue 34, finding 2): a
// coordinator whose task says federation.secure_aggregation: true but
// whose rounds come without the secure-aggregation session (the project's
// coordinator with its secure aggregator removed) gets no upload in the
// clear: the site ends naming why, before training.
func TestSiteRefusesClearUploadUnderSecureTask(t *testing.T) {
	model := smallModel(t)
	mid, err := IdentifyModel(model, "")
	if err != nil {
		t.Fatal(err)
	}
	e := tinyConfig(t, "federation.secure_aggregation=true", "federation.rounds=1")
	o, err := experiment.FromConfig(e, model, e.Seed, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	coord, err := experiment.PrepareFederated(ctx, o, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	spec, err := coord.Spec()
	if err != nil {
		t.Fatal(err)
	}
	task, err := serveTask(e, mid, spec)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := transport.NewServer(transport.ServerConfig{Sites: []string{"s0", "s1"}, Insecure: true, Spec: transport.Spec(spec), Task: task,
		PollWait: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.GRPC().Serve(lis)
	t.Cleanup(srv.GRPC().Stop)
	co := serveCoordinator(o, coord.Plan.Strategy, 2, 1, time.Minute, e.Fingerprint())
	co.Logger, co.Proxies, co.Secure = quiet, srv.Proxies(), nil // the tampering: no secure aggregation
	go co.Run(ctx)
	c := SiteConfig{Server: lis.Addr().String(), Name: "s0", Insecure: true, Sites: []string{"s0", "s1"}, Data: "world", Model: model, ModelArg: model,
		State: t.TempDir(), Logger: quiet}
	_, err = Site(ctx, c)
	if !errors.Is(err, transport.ErrUploadRefused) || !strings.Contains(err.Error(), "without a secure-aggregation session") ||
		!strings.Contains(err.Error(), "federation.secure_aggregation: true") {
		t.Errorf("the site's answer to a fit task without secure aggregation under a secure task: %v; want a refusal to upload in the clear", err)
	}
	var m dto.Metric
	if err := srv.Metrics().WireIn.Write(&m); err != nil || m.GetCounter().GetValue() != 0 {
		t.Errorf("the coordinator received %v bytes of updates (%v)", m.GetCounter().GetValue(), err)
	}
}
