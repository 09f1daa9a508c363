package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// resolvedHeader and taskHeader begin the YAML of [Experiment.Resolved] and
// [Experiment.TaskYAML]; a file that begins with one sets every field.
const (
	resolvedHeader = "# pfedmma experiment, fully resolved"
	taskHeader     = "# pfedmma task"
)

// Resolved returns the fully resolved config as YAML, every field written
// out, headed by a comment with its fingerprint. A run writes it into its
// output folder; [Load] or [Compose] on it gives back an equal Experiment
// (whatever preset they start from, since every field is set).
func (e *Experiment) Resolved() ([]byte, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%s\n# fingerprint: %s\n", resolvedHeader, e.Fingerprint())
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("config: resolved YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: resolved YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// fingerprintSkip are the fields that cannot change a run's results.
// aggregation enters through its own lines (Aggregation.fingerprintLines).
var fingerprintSkip = []string{"name", "threads", "cache", "output", "aggregation"}

// Fingerprint is a stable hash (64 hex digits, SHA-256) of the settings
// that determine a run's results; `pfedmma run --resume` refuses a config
// whose fingerprint differs from the interrupted run's. It leaves out name,
// threads, cache and output (they change speed or files, not numbers), the
// sections of registered methods the run does not run (so that registering
// a method leaves every fingerprint as it was),
// seed when seeds is set, and aggregation's settings that are not in
// effect (aggregation off hashes as before the section existed). It hashes sorted "path=value" lines of the
// non-zero fields, so it does not depend on field order, and a field added
// to Experiment later leaves old fingerprints unchanged while it holds its
// zero value.
func (e *Experiment) Fingerprint() string {
	sum := sha256.Sum256([]byte(strings.Join(e.fingerprintLines(), "\n")))
	return hex.EncodeToString(sum[:])
}

// Settings returns the sorted "key=value" lines the Fingerprint hashes,
// without dataset.root (a folder on each machine): what a federation's
// coordinator and sites compare to name the keys on which they differ.
func (e *Experiment) Settings() []string {
	return slices.DeleteFunc(e.fingerprintLines(), func(l string) bool { return strings.HasPrefix(l, "dataset.root=") })
}

func (e *Experiment) fingerprintLines() []string {
	var lines []string
	flatten(reflect.ValueOf(*e), "", &lines)
	for _, name := range slices.Sorted(maps.Keys(e.Sections)) {
		if !slices.Contains(e.Methods, name) {
			continue // a method the run does not run: its settings change nothing
		}
		flatten(reflect.ValueOf(e.Sections[name]).Elem(), name, &lines)
	}
	lines = append(lines, e.Aggregation.fingerprintLines()...)
	lines = slices.DeleteFunc(lines, func(l string) bool {
		return len(e.Seeds) > 0 && strings.HasPrefix(l, "seed=") ||
			l == `federation.compress="none"` || // the same run as no compress key
			strings.HasPrefix(l, "train.drop_last=") // dropLastLines
	})
	lines = append(lines, e.dropLastLines()...)
	slices.Sort(lines)
	return lines
}

// dropLastLines is train.drop_last's part of the fingerprint, by its
// effect on the run's methods: nothing when no method of the run drops a
// partial last batch (false, or auto over methods whose authors keep it:
// the same run as before the key, when every epoch kept it), the line
// "train.drop_last=true" of a run that forces it (as when the key was a
// boolean), and `train.drop_last="auto"` when auto drops it for at least
// one method.
func (e *Experiment) dropLastLines() []string {
	if !slices.ContainsFunc(e.Methods, e.DropLast) {
		return nil
	}
	if e.Train.DropLast == DropLastTrue {
		return []string{"train.drop_last=true"}
	}
	return []string{"train.drop_last=" + strconv.Quote(e.Train.DropLast)}
}

// flatten appends "path=value" for every non-zero leaf of v.
func flatten(v reflect.Value, path string, out *[]string) {
	t := v.Type()
	if v.Kind() == reflect.Struct && !isLeafType(t) {
		for i := range t.NumField() {
			name := yamlName(t.Field(i))
			if name == "" || (path == "" && slices.Contains(fingerprintSkip, name)) {
				continue
			}
			flatten(v.Field(i), joinPath(path, name), out)
		}
		return
	}
	if v.IsZero() || (v.Kind() == reflect.Slice && v.Len() == 0) {
		return
	}
	*out = append(*out, path+"="+leafString(v))
}

func leafString(v reflect.Value) string {
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return strconv.Quote(s.String())
	}
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = leafString(v.Index(i))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return fmt.Sprint(v.Interface())
}
