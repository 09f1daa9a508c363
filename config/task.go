package config

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// SiteLocalKeys are the settings a federation's site keeps its own: where
// its data and model live (dataset.root, model, vocab) and how it computes
// (threads, cache). They change where files are and how fast a site runs,
// never its numbers; [Experiment.TaskYAML] leaves them out of the task a
// coordinator sends, and a site may --set them.
var SiteLocalKeys = []string{"dataset.root", "model", "vocab", "threads", "cache"}

// IsSiteLocal reports whether the --set path (e.g. "cache.memory_mib") is
// one of [SiteLocalKeys] or under one.
func IsSiteLocal(path string) bool {
	for _, k := range SiteLocalKeys {
		if path == k || strings.HasPrefix(path, k+".") {
			return true
		}
	}
	return false
}

// TaskYAML returns the experiment as the task a federation's coordinator
// sends its sites: the fully resolved YAML of [Experiment.Resolved]
// (config.yaml's format) without the [SiteLocalKeys]. [ParseTask] reads it
// back.
func (e *Experiment) TaskYAML() ([]byte, error) {
	v, err := e.MarshalYAML()
	if err != nil {
		return nil, fmt.Errorf("config: task YAML: %w", err)
	}
	root := v.(*yaml.Node)
	for _, k := range SiteLocalKeys {
		parent, key := root, k
		if p, rest, ok := strings.Cut(k, "."); ok {
			if parent = mappingValue(root, p); parent == nil {
				continue
			}
			key = rest
		}
		deleteKey(parent, key)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, taskHeader+" (the coordinator's resolved experiment without the site-local settings)\n# fingerprint: %s\n", e.Fingerprint())
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("config: task YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: task YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// ParseTask reads a task ([Experiment.TaskYAML]) as [Compose] reads a
// configuration file named name, then applies the site's own overrides
// (path=value, e.g. dataset.root=/data or threads=4) and validates the
// result: errors name the file (name), the line and the key.
func ParseTask(name string, data []byte, sets []string) (*Experiment, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("config %s: empty (the coordinator sent no experiment)", name)
	}
	return Compose(Sources{File: name, Data: data, Sets: sets})
}

// TaskSettings are the "key=value" lines of [Experiment.Settings] without
// the paths of the model and vocabulary, which are a site's own (the
// model's identity travels as its SHA-256 instead): what a coordinator and
// its sites compare.
func (e *Experiment) TaskSettings() []string {
	return slices.DeleteFunc(e.Settings(), func(l string) bool {
		return strings.HasPrefix(l, "model=") || strings.HasPrefix(l, "vocab=")
	})
}

// mappingValue returns the value node of key in the mapping m (nil when
// absent).
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// deleteKey removes key and its value from the mapping m.
func deleteKey(m *yaml.Node, key string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = slices.Delete(m.Content, i, i+2)
			return
		}
	}
}
