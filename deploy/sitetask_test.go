package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pfedmma/pfedmma/assets"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/transport"
)

// coordinatorTask is the task a coordinator with these --set overrides
// would send (model hash sha).
func coordinatorTask(t *testing.T, sha string, sets ...string) (*config.Experiment, *transport.Task) {
	return coordinatorTaskID(t, ModelID{Weights: sha, Vocab: strings.Repeat("c3", 32)}, sets...)
}

func coordinatorTaskID(t *testing.T, id ModelID, sets ...string) (*config.Experiment, *transport.Task) {
	t.Helper()
	e, err := config.Compose(config.Sources{Sets: append([]string{"methods=[pfedmma]", "federation.clients=3", "federation.rounds=4", "model=/coordinator/clip.safetensors"}, sets...)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := serveTask(e, id, map[string][]int{"a": {2, 3}, "b": {4}})
	if err != nil {
		t.Fatal(err)
	}
	return e, task
}

// TestAcceptTask: the site runs the coordinator's experiment with its own
// site-local settings, and its policy refuses what it does not accept.
func TestAcceptTask(t *testing.T) {
	sha := strings.Repeat("1a", 32)
	id := ModelID{Weights: sha, Vocab: strings.Repeat("c3", 32)}
	coord, task := coordinatorTask(t, sha, "threads=8", "cache.memory_mib=512", "pfedmma.dim=8")
	if task.UploadBytes != 4*(6+4) || task.Fingerprint != coord.Fingerprint() || task.ModelSHA256 != sha || task.VocabSHA256 != id.Vocab {
		t.Errorf("task: upload %d fingerprint %s model %s", task.UploadBytes, task.Fingerprint, task.ModelSHA256)
	}
	if _, half := coordinatorTask(t, sha, "federation.compress=fp16"); half.UploadBytes != 2*(6+4) {
		t.Errorf("fp16 upload estimated at %d bytes, want %d", half.UploadBytes, 2*(6+4))
	}
	site := SiteConfig{Data: "world", Local: []string{"threads=2"}}
	e, err := AcceptTask(task, site, id)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := taskSettings(e, id), taskSettings(coord, id); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the site's settings:\n%v\nthe coordinator's:\n%v", got, want)
	}
	if e.Threads != 2 || e.Cache.MemoryMiB == 512 || e.Model != "" {
		t.Errorf("site-local settings: threads %d cache %d model %q (want the site's)", e.Threads, e.Cache.MemoryMiB, e.Model)
	}
	for _, c := range []struct {
		name string
		site SiteConfig
		id   ModelID
		want string
	}{
		{"another model", SiteConfig{Data: "world", ModelArg: "/site/clip.safetensors"}, ModelID{strings.Repeat("2b", 32), id.Vocab}, "/site/clip.safetensors"},
		{"another vocabulary", SiteConfig{Data: "world", Vocab: "/site/vocab.json", Local: []string{"vocab=/site/vocab.json"}}, ModelID{sha, strings.Repeat("4d", 32)}, "/site/vocab.json"},
		{"method", SiteConfig{Data: "world", Policy: SitePolicy{AcceptMethods: []string{"promptfl"}}}, id, "method pfedmma is not among --accept-methods promptfl"},
	} {
		_, err := AcceptTask(task, c.site, c.id)
		var r *TaskRefusal
		if !errors.As(err, &r) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a refusal naming %q", c.name, err, c.want)
		}
	}
	// the coordinator's declared upload size decides nothing (the site
	// computes its own once the method is built: TestSiteComputesUploads)
	if _, err := AcceptTask(task, SiteConfig{Data: "world", Policy: SitePolicy{MaxUploadMiB: 30.0 / (1 << 20)}}, id); err != nil {
		t.Errorf("a task declaring 40 bytes at a site allowing 30: %v; the declaration is the coordinator's word, not the site's check", err)
	}
	if _, err := AcceptTask(task, SiteConfig{Data: "world", Policy: SitePolicy{MaxUploadMiB: 1, AcceptMethods: []string{"pfedmma"}}}, id); err != nil {
		t.Errorf("a task within the policy: %v", err)
	}
	// a malformed task names the task and the key
	bad := *task
	bad.Experiment = []byte("federation:\n  rounds: many\n")
	if _, err := AcceptTask(&bad, site, id); err == nil || !strings.Contains(err.Error(), TaskName) || !strings.Contains(err.Error(), "federation.rounds") {
		t.Errorf("malformed task: %v", err)
	}
	// a dataset on disk needs --data DIR, not world
	_, disk := coordinatorTask(t, sha, "dataset.name=caltech101", "dataset.root=/coordinator/DATA")
	if _, err := AcceptTask(disk, site, id); err == nil || !strings.Contains(err.Error(), "--data") {
		t.Errorf("--data world for caltech101: %v", err)
	}
	if e, err := AcceptTask(disk, SiteConfig{Data: "/site/DATA"}, id); err != nil || e.Dataset.Root != "/site/DATA" {
		t.Errorf("--data DIR for caltech101: %v", err)
	}
}

// TestKeepTask: the task is kept in the state folder; a state folder
// holding another experiment's state is refused, not overwritten.
func TestKeepTask(t *testing.T) {
	dir := t.TempDir()
	_, a := coordinatorTask(t, strings.Repeat("1a", 32))
	_, b := coordinatorTask(t, strings.Repeat("1a", 32), "federation.rounds=5")
	if err := keepTask(dir, a); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, TaskFile)); string(got) != string(a.Experiment) {
		t.Fatalf("task.yaml:\n%s", got)
	}
	if err := keepTask(dir, b); err != nil { // no state yet: a new task is fine
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "state", "round-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := keepTask(dir, b); err != nil { // the same experiment resumes
		t.Fatal(err)
	}
	if err := keepTask(dir, a); err == nil || !strings.Contains(err.Error(), "another experiment") || !strings.Contains(err.Error(), a.Fingerprint) {
		t.Errorf("another experiment's state: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, TaskFile)); string(got) != string(b.Experiment) {
		t.Error("the kept task was overwritten by a refused one")
	}
}

// TestModelSHA256: a single-file checkpoint's identity is its file's
// SHA-256 (what sha256sum prints), its folder's the same.
func TestModelSHA256(t *testing.T) {
	dir, err := assets.DefaultModelDir()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, assets.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	want := hex.EncodeToString(sum[:])
	for _, p := range []string{filepath.Join(dir, assets.ModelFile), dir} {
		if got, err := ModelSHA256(p); err != nil || got != want {
			t.Errorf("ModelSHA256(%s) = %s, %v; want %s", p, got, err, want)
		}
	}
	vb, err := os.ReadFile(filepath.Join(dir, "bpe_simple_vocab_16e6.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	vsum := sha256.Sum256(vb)
	id, err := IdentifyModel(dir, "")
	if err != nil || id.Weights != want || id.Vocab != hex.EncodeToString(vsum[:]) {
		t.Errorf("IdentifyModel(%s) = %+v, %v; want the weights' and the vocabulary's SHA-256", dir, id, err)
	}
	// a Hugging Face vocabulary is vocab.json with its merges.txt
	hf, err := VocabSHA256(dir, filepath.Join(dir, "vocab.json"))
	if err != nil {
		t.Fatal(err)
	}
	only, err := hashFiles(filepath.Join(dir, "vocab.json"))
	if err != nil || hf == only || hf == id.Vocab {
		t.Errorf("vocab.json's identity %s leaves out merges.txt (%s, %v)", hf, only, err)
	}
	if _, err := ModelSHA256(filepath.Join(t.TempDir(), "missing.safetensors")); err == nil || !strings.Contains(err.Error(), "model") {
		t.Errorf("missing model: %v", err)
	}
}
