package deploy

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

	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/checkpoint"
	"github.com/pfedmma/pfedmma/compress"
	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/experiment"
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

// TaskRefusal is a task a site's policy refuses: the site tells the
// coordinator and exits with it.
type TaskRefusal struct{ Reason string }

func (r *TaskRefusal) Error() string { return "the site refuses the coordinator's task: " + r.Reason }

// AcceptTask reads the coordinator's task as site c (its data folder or
// world, its model, its site-local overrides) and checks it against the
// site's policy and model (id, the identity of c.Model and its
// vocabulary). It returns the experiment the site runs, or a *TaskRefusal,
// or an error naming what is malformed in the task. A task that sets any
// of the site's own keys (config.SiteLocalKeys: its data, model,
// vocabulary, threads, cache) is refused naming them; the experiment
// returned loads c.Model and c.Vocab, the files whose hashes id holds.
// The size of what the site uploads is not checked here but computed by
// the site from the method once built (SiteFromTask): task.UploadBytes is
// the coordinator's word and decides nothing.
func AcceptTask(task *transport.Task, c SiteConfig, id ModelID) (*config.Experiment, error) {
	if err := checkSiteLocal(task.Experiment); err != nil {
		return nil, err
	}
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
	// the files hashed in id are the ones loaded
	e.Model, e.Vocab = c.ModelArg, c.Vocab
	if task.ModelSHA256 != id.Weights {
		return nil, &TaskRefusal{fmt.Sprintf("the coordinator's model has SHA-256 %s, this site's (%s) %s: give the coordinator's checkpoint with --model FILE (a site never downloads weights)",
			task.ModelSHA256, modelName(c.ModelArg), id.Weights)}
	}
	if task.VocabSHA256 != id.Vocab {
		return nil, &TaskRefusal{fmt.Sprintf("the coordinator's vocabulary has SHA-256 %s, this site's (%s) %s: put the coordinator's vocabulary beside the model or give it with --set vocab=FILE",
			task.VocabSHA256, cmp.Or(c.Vocab, "beside "+modelName(c.ModelArg)), id.Vocab)}
	}
	method, err := experiment.TrainedMethod(e.Methods)
	if err != nil {
		return nil, fmt.Errorf("%s: methods: %w", TaskName, err)
	}
	if err := c.Policy.check(e, method); err != nil {
		return nil, err
	}
	return e, nil
}

// check refuses a task (experiment e training method) the policy does not
// accept: another method, a pinned setting changed, no secure aggregation
// where it is required, fewer clients than the minimum of participants.
func (p SitePolicy) check(e *config.Experiment, method string) error {
	if len(p.AcceptMethods) > 0 && !slices.Contains(p.AcceptMethods, method) {
		return &TaskRefusal{fmt.Sprintf("method %s is not among %s %s", method, p.name(policyMethods, "--accept-methods"), strings.Join(p.AcceptMethods, ","))}
	}
	if err := p.checkPins(e); err != nil {
		return err
	}
	if p.RequireSecureAggregation && !e.Federation.SecureAggregation {
		return &TaskRefusal{fmt.Sprintf("the task's federation.secure_aggregation is false and %s requires secure aggregation: this site never uploads in the clear",
			p.name(policyRequireSecure, "--require-secure-aggregation"))}
	}
	if n := p.MinParticipants; n > 0 && e.Federation.Clients < n {
		return &TaskRefusal{fmt.Sprintf("the task's federation has %d clients, fewer than %s %d", e.Federation.Clients, p.name(policyMinPart, "--min-participants"), n)}
	}
	return nil
}

// checkSiteLocal refuses a task whose YAML sets any of the site's own keys
// (config.SiteLocalKeys, at the top level or one level down), or a YAML
// merge key that could carry them.
func checkSiteLocal(data []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil // config.ParseTask names what is malformed
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	var found []string
	var walk func(m *yaml.Node, prefix string, depth int)
	walk = func(m *yaml.Node, prefix string, depth int) {
		if m.Kind != yaml.MappingNode || depth > 1 {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := m.Content[i]
			if k.Kind == yaml.AliasNode && k.Alias != nil {
				k = k.Alias
			}
			path := prefix + k.Value
			switch {
			case k.Value == "<<" || k.Tag == "!!merge":
				found = append(found, fmt.Sprintf("a YAML merge key under %q (line %d)", cmp.Or(prefix, "the top"), k.Line))
			case config.IsSiteLocal(path):
				found = append(found, fmt.Sprintf("%s (line %d)", path, k.Line))
			default:
				walk(m.Content[i+1], path+".", depth+1)
			}
		}
	}
	walk(root, "", 0)
	if len(found) > 0 {
		return &TaskRefusal{fmt.Sprintf("the task sets %s: a site's data, model, vocabulary, threads and cache (%s) are its own, never the coordinator's",
			strings.Join(found, ", "), strings.Join(config.SiteLocalKeys, ", "))}
	}
	return nil
}

func modelName(arg string) string {
	if arg == "" {
		return "the embedded model"
	}
	return arg
}
