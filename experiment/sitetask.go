package experiment

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/transport"
)

// ModelSHA256Key is the setting a coordinator and its sites compare for the
// model's identity (its weights' SHA-256) in place of its path, which is
// each machine's own.
const ModelSHA256Key = "model_sha256"

// TaskName names the coordinator's task in errors about its content.
const TaskName = "the coordinator's task"

// ModelSHA256 identifies a checkpoint (a file or a model folder) by the
// SHA-256 of its weight file(s), read in the loader's order: for a single
// file, what `sha256sum FILE` prints.
func ModelSHA256(path string) (string, error) {
	info, err := checkpoint.Inspect(path)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	h := sha256.New()
	for _, name := range info.Files {
		f, err := os.Open(name)
		if err != nil {
			return "", fmt.Errorf("model: %w", err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("model %s: %w", name, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// taskSettings are the settings a coordinator and its sites compare: the
// experiment's, with the model's hash for its path.
func taskSettings(e *config.Experiment, modelSHA string) []string {
	s := append(e.TaskSettings(), ModelSHA256Key+"="+modelSHA)
	slices.Sort(s)
	return s
}

// serveTask is the task Serve sends its sites: the experiment without
// site-local settings, the model's hash, the fingerprint and the size of
// one upload (spec: the shared tensors' shapes).
func serveTask(e *config.Experiment, modelSHA string, spec map[string][]int) (*transport.Task, error) {
	y, err := e.TaskYAML()
	if err != nil {
		return nil, err
	}
	var bytes int64
	for _, shape := range spec {
		bytes += 4 * int64(tensor.Numel(shape))
	}
	return &transport.Task{Experiment: y, ModelSHA256: modelSHA, Fingerprint: e.Fingerprint(), UploadBytes: bytes}, nil
}

// SitePolicy is what tasks a site accepts.
type SitePolicy struct {
	// AcceptMethods, when set, lists the trained methods the site runs
	// (--accept-methods).
	AcceptMethods []string
	// MaxUploadMiB, when positive, bounds one upload (--max-upload-mib).
	MaxUploadMiB float64
}

// TaskRefusal is a task a site's policy refuses: the site tells the
// coordinator and exits with it.
type TaskRefusal struct{ Reason string }

func (r *TaskRefusal) Error() string { return "the site refuses the coordinator's task: " + r.Reason }

// AcceptTask reads the coordinator's task as site c (its data folder or
// world, its model, its site-local overrides) and checks it against the
// site's policy and model (modelSHA, the SHA-256 of c.Model). It returns
// the experiment the site runs, or a *TaskRefusal, or an error naming what
// is malformed in the task.
func AcceptTask(task *transport.Task, c SiteConfig, modelSHA string) (*config.Experiment, error) {
	sets := slices.Clone(c.Local)
	sets = append(sets, "model="+c.ModelArg)
	if c.Data != "world" {
		sets = append(sets, "dataset.root="+c.Data)
	}
	e, err := config.ParseTask(TaskName, task.Experiment, sets)
	if err != nil {
		if c.Data == "world" && strings.Contains(err.Error(), "dataset.root") {
			return nil, fmt.Errorf("--data world, but the coordinator's experiment reads a dataset folder: give it with --data DIR: %w", err)
		}
		return nil, err
	}
	if c.Experiment != nil { // site-local settings of the site's own configuration
		e.Threads, e.Cache = c.Experiment.Threads, c.Experiment.Cache
	}
	if task.ModelSHA256 != modelSHA {
		return nil, &TaskRefusal{fmt.Sprintf("the coordinator's model has SHA-256 %s, this site's (%s) %s: give the coordinator's checkpoint with --model FILE (a site never downloads weights)",
			task.ModelSHA256, modelName(c.ModelArg), modelSHA)}
	}
	method, err := TrainedMethod(e.Methods)
	if err != nil {
		return nil, fmt.Errorf("%s: methods: %w", TaskName, err)
	}
	if len(c.Policy.AcceptMethods) > 0 && !slices.Contains(c.Policy.AcceptMethods, method) {
		return nil, &TaskRefusal{fmt.Sprintf("method %s is not among --accept-methods %s", method, strings.Join(c.Policy.AcceptMethods, ","))}
	}
	if lim := c.Policy.MaxUploadMiB; lim > 0 && float64(task.UploadBytes) > lim*(1<<20) {
		return nil, &TaskRefusal{fmt.Sprintf("one upload of method %s weighs %.2f MiB, over --max-upload-mib %g", method, float64(task.UploadBytes)/(1<<20), lim)}
	}
	return e, nil
}

func modelName(arg string) string {
	if arg == "" {
		return "the embedded model"
	}
	return arg
}
