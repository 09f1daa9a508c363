package experiment

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/protocol"
	"github.com/pfedmma/pfedmma/runfiles"
)

// writeRunInfo writes run.json for a run of `pfedmma run`.
func writeRunInfo(o Options, task *protocol.Task, tmpl string) error {
	return writeRunInfoFile(o, task, tmpl, false)
}

// writeServedRunInfo writes run.json for a federation coordinated by
// `pfedmma serve` (whose sites keep their files).
func writeServedRunInfo(o Options, task *protocol.Task, tmpl string) error {
	return writeRunInfoFile(o, task, tmpl, true)
}

// writeRunInfoFile writes o.OutDir's run.json: the run's model, task and
// methods with each one's resolved settings and sites folder.
func writeRunInfoFile(o Options, task *protocol.Task, tmpl string, served bool) error {
	info := runfiles.Info{Served: served, Model: o.ModelPath, Vocab: o.VocabPath, Template: tmpl, Dataset: task.Dataset.Name,
		Protocol: task.Protocol, Classes: task.Dataset.Classes, Spaces: task.Spaces, ClientSpace: map[int]int{},
		Methods: o.Methods, Sections: map[string]string{}, Sites: map[string]string{}}
	for _, name := range o.Methods {
		info.Sites[name] = runfiles.SitesFolder(name)
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
	return runfiles.WriteInfo(o.OutDir, info)
}
