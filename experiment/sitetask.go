package experiment

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/tensor"
	"github.com/pfedmma/pfedmma/tokenizer"
	"github.com/pfedmma/pfedmma/transport"
)

// ModelSHA256Key and VocabSHA256Key are the settings a coordinator and its
// sites compare for the model's identity (the SHA-256 of its weights and
// of its vocabulary) in place of their paths, which are each machine's own.
const (
	ModelSHA256Key = "model_sha256"
	VocabSHA256Key = "vocab_sha256"
)

// TaskName names the coordinator's task in errors about its content.
const TaskName = "the coordinator's task"

// ModelID identifies a model by content: the SHA-256 of its weight file(s)
// and of its tokenizer's vocabulary.
type ModelID struct{ Weights, Vocab string }

// IdentifyModel hashes the checkpoint at model (a file or a model folder)
// and its vocabulary: vocab, or the one beside the model when empty.
func IdentifyModel(model, vocab string) (ModelID, error) {
	w, err := ModelSHA256(model)
	if err != nil {
		return ModelID{}, err
	}
	v, err := VocabSHA256(model, vocab)
	if err != nil {
		return ModelID{}, err
	}
	return ModelID{Weights: w, Vocab: v}, nil
}

// ModelSHA256 identifies a checkpoint (a file or a model folder) by the
// SHA-256 of its weight file(s), read in the loader's order: for a single
// file, what `sha256sum FILE` prints.
func ModelSHA256(path string) (string, error) {
	info, err := checkpoint.Inspect(path)
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	return hashFiles(info.Files...)
}

// VocabSHA256 identifies the vocabulary LoadModel reads for model: vocab,
// or the one found beside the model when empty (a Hugging Face vocab.json
// with its merges.txt).
func VocabSHA256(model, vocab string) (string, error) {
	if vocab == "" {
		var err error
		if vocab, err = tokenizer.FindVocab(model); err != nil {
			return "", fmt.Errorf("vocabulary: %w", err)
		}
	}
	files := []string{vocab}
	if filepath.Base(vocab) == tokenizer.HFVocab {
		files = append(files, filepath.Join(filepath.Dir(vocab), tokenizer.HFMerges))
	}
	h, err := hashFiles(files...)
	if err != nil {
		return "", fmt.Errorf("vocabulary: %w", err)
	}
	return h, nil
}

// hashFiles is the SHA-256 of the files' contents, one after the other.
func hashFiles(names ...string) (string, error) {
	h := sha256.New()
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// taskSettings are the settings a coordinator and its sites compare: the
// experiment's, with the model's identity for its paths.
func taskSettings(e *config.Experiment, id ModelID) []string {
	s := append(e.TaskSettings(), ModelSHA256Key+"="+id.Weights, VocabSHA256Key+"="+id.Vocab)
	slices.Sort(s)
	return s
}

// serveTask is the task Serve sends its sites: the experiment without
// site-local settings, the model's identity, the fingerprint and the size
// of one upload (spec: the shared tensors' shapes, encoded as
// federation.compress says).
func serveTask(e *config.Experiment, id ModelID, spec map[string][]int) (*transport.Task, error) {
	y, err := e.TaskYAML()
	if err != nil {
		return nil, err
	}
	codec, err := compress.Parse(e.Federation.Compress)
	if err != nil {
		return nil, fmt.Errorf("federation.compress: %w", err)
	}
	var bytes int64
	for _, shape := range spec {
		bytes += int64(codec.Size(tensor.Numel(shape)))
	}
	return &transport.Task{Experiment: y, ModelSHA256: id.Weights, VocabSHA256: id.Vocab, Fingerprint: e.Fingerprint(), UploadBytes: bytes}, nil
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
// site's policy and model (id, the identity of c.Model and its
// vocabulary). It returns the experiment the site runs, or a *TaskRefusal,
// or an error naming what is malformed in the task.
func AcceptTask(task *transport.Task, c SiteConfig, id ModelID) (*config.Experiment, error) {
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
	if task.ModelSHA256 != id.Weights {
		return nil, &TaskRefusal{fmt.Sprintf("the coordinator's model has SHA-256 %s, this site's (%s) %s: give the coordinator's checkpoint with --model FILE (a site never downloads weights)",
			task.ModelSHA256, modelName(c.ModelArg), id.Weights)}
	}
	if task.VocabSHA256 != id.Vocab {
		return nil, &TaskRefusal{fmt.Sprintf("the coordinator's vocabulary has SHA-256 %s, this site's (%s) %s: put the coordinator's vocabulary beside the model or give it with --set vocab=FILE",
			task.VocabSHA256, cmp.Or(e.Vocab, "beside "+modelName(c.ModelArg)), id.Vocab)}
	}
	method, err := TrainedMethod(e.Methods)
	if err != nil {
		return nil, fmt.Errorf("%s: methods: %w", TaskName, err)
	}
	if len(c.Policy.AcceptMethods) > 0 && !slices.Contains(c.Policy.AcceptMethods, method) {
		return nil, &TaskRefusal{fmt.Sprintf("method %s is not among --accept-methods %s", method, strings.Join(c.Policy.AcceptMethods, ","))}
	}
	if lim := c.Policy.MaxUploadMiB; lim > 0 && float64(task.UploadBytes) > lim*(1<<20) {
		return nil, &TaskRefusal{fmt.Sprintf("one upload of method %s weighs %.4g MiB (%d bytes), over --max-upload-mib %g", method, float64(task.UploadBytes)/(1<<20), task.UploadBytes, lim)}
	}
	return e, nil
}

func modelName(arg string) string {
	if arg == "" {
		return "the embedded model"
	}
	return arg
}
