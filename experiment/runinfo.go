package experiment

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/inputfile"
	"github.com/pfedmma/pfedmma/protocol"
)

// RunInfo is written to run.json: what `pfedmma predict` needs to rebuild a
// client's classifier.
type RunInfo struct {
	Model    string           `json:"model"`
	Vocab    string           `json:"vocab,omitempty"`
	Template string           `json:"template"`
	Dataset  string           `json:"dataset"`
	Protocol string           `json:"protocol"`
	Classes  []string         `json:"classes"`
	Spaces   []protocol.Space `json:"spaces"`
	// ClientSpace maps a client ID to the label space it was trained over.
	ClientSpace map[int]int `json:"client_space"`
	// Methods lists the run's methods; Sections holds each one's resolved
	// settings (YAML) and Sites the folder of its per-site files.
	Methods  []string          `json:"methods"`
	Sections map[string]string `json:"sections,omitempty"`
	Sites    map[string]string `json:"sites,omitempty"`
}

// RunInfoFile is the name of the run description in an output folder.
const RunInfoFile = "run.json"

func writeRunInfo(o Options, task *protocol.Task, tmpl string) error {
	info := RunInfo{Model: o.ModelPath, Vocab: o.VocabPath, Template: tmpl, Dataset: task.Dataset.Name,
		Protocol: task.Protocol, Classes: task.Dataset.Classes, Spaces: task.Spaces, ClientSpace: map[int]int{},
		Methods: o.Methods, Sections: map[string]string{}, Sites: map[string]string{}}
	for _, name := range o.Methods {
		info.Sites[name] = SitesFolder(name)
		if sec := o.Sections[name]; sec != nil {
			b, err := yaml.Marshal(sec)
			if err != nil {
				return fmt.Errorf("run.json: section %s: %w", name, err)
			}
			info.Sections[name] = string(b)
		}
	}
	for _, c := range task.Clients {
		info.ClientSpace[c.ID] = c.TrainSpace
	}
	if abs, err := filepath.Abs(info.Model); err == nil {
		info.Model = abs
	}
	data, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(o.OutDir, RunInfoFile), append(data, '\n'))
}

// ReadRunInfo reads run.json from a run's output folder.
func ReadRunInfo(dir string) (*RunInfo, error) {
	path := filepath.Join(dir, RunInfoFile)
	data, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	info, err := decodeRunInfo(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}
