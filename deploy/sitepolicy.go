package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// SitePolicy is what a site accepts of a coordinator: which tasks, what
// may leave it, and how (`pfedmma site --policy FILE`, or the flags that
// are its shorthands).
type SitePolicy struct {
	// AcceptMethods, when set, lists the trained methods the site runs
	// (methods, --accept-methods).
	AcceptMethods []string
	// Settings pins settings that decide what a method shares ("path" →
	// YAML value, e.g. fedotp.avg_prompt → 1): a task with another value
	// is refused. A pin in the section of a method the task does not run
	// is ignored.
	Settings map[string]string
	// MaxUploadMiB, when positive, bounds one upload (max_upload_mib,
	// --max-upload-mib): the size the site computes from the accepted
	// task's tensors (a masked value counting 8 bytes), and every real
	// upload.
	MaxUploadMiB float64
	// MaxDownloadMiB, when positive, bounds the parameters of one task the
	// site downloads (max_download_mib, --max-download-mib; default 256).
	MaxDownloadMiB float64
	// RequireSecureAggregation refuses a task without
	// federation.secure_aggregation and any fit task that comes without a
	// secure-aggregation session (require_secure_aggregation,
	// --require-secure-aggregation).
	RequireSecureAggregation bool
	// MinParticipants, when positive, is the fewest sites the site accepts
	// in a secure-aggregation round (min_participants, --min-participants):
	// a task whose federation.clients is fewer is refused, and the
	// secure-aggregation layer receives it as
	// transport.SiteConfig.MinParticipants for each round.
	MinParticipants int
	// File names the policy file (--policy) and FileKeys the keys it
	// sets, for messages.
	File     string
	FileKeys []string
}

// Policy file keys.
const (
	policyMethods       = "methods"
	policySettings      = "settings"
	policyMaxUpload     = "max_upload_mib"
	policyMaxDownload   = "max_download_mib"
	policyRequireSecure = "require_secure_aggregation"
	policyMinPart       = "min_participants"
)

// PolicyKeys are the keys of a site policy file.
var PolicyKeys = []string{policyMethods, policySettings, policyMaxUpload, policyMaxDownload, policyRequireSecure, policyMinPart}

// LoadSitePolicy reads a site policy file (YAML: methods, settings,
// max_upload_mib, max_download_mib, require_secure_aggregation,
// min_participants) onto p and returns the keys it sets. Errors name the
// file and the key.
func LoadSitePolicy(path string, p *SitePolicy) ([]string, error) {
	data, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	if len(data) > config.MaxFileBytes {
		return nil, fmt.Errorf("--policy %s: %d bytes, at most %d", path, len(data), config.MaxFileBytes)
	}
	bad := func(key string, format string, a ...any) error {
		return fmt.Errorf("--policy %s: %s: %s", path, key, fmt.Sprintf(format, a...))
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("--policy %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == 0 || root.Tag == "!!null" {
		return nil, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("--policy %s: want a mapping of keys (%s)", path, strings.Join(PolicyKeys, ", "))
	}
	var keys []string
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i].Value, root.Content[i+1]
		if slices.Contains(keys, k) {
			return nil, bad(k, "line %d: given twice", root.Content[i].Line)
		}
		keys = append(keys, k)
		if err := p.decodeKey(k, v); err != nil {
			return nil, bad(k, "line %d: %v", root.Content[i].Line, err)
		}
	}
	p.File, p.FileKeys = path, keys
	return keys, nil
}

// decodeKey sets policy key k from its YAML value v.
func (p *SitePolicy) decodeKey(k string, v *yaml.Node) error {
	switch k {
	case policyMethods:
		var ms []string
		if err := v.Decode(&ms); err != nil {
			return errors.New("want a list of method names")
		}
		for _, m := range ms {
			if !slices.Contains(config.Methods(), m) {
				return fmt.Errorf("%q is no method (pfedmma methods lists them)", m)
			}
		}
		p.AcceptMethods = ms
	case policySettings:
		return p.decodeSettings(v)
	case policyMaxUpload, policyMaxDownload:
		var f float64
		if err := v.Decode(&f); err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("%q: want a size in MiB, ≥ 0 (0: no limit)", v.Value)
		}
		if k == policyMaxUpload {
			p.MaxUploadMiB = f
		} else {
			p.MaxDownloadMiB = f
		}
	case policyRequireSecure:
		if err := v.Decode(&p.RequireSecureAggregation); err != nil {
			return fmt.Errorf("%q: want true or false", v.Value)
		}
	case policyMinPart:
		if err := v.Decode(&p.MinParticipants); err != nil || p.MinParticipants < 0 {
			return fmt.Errorf("%q: want a number of sites ≥ 0", v.Value)
		}
	default:
		return fmt.Errorf("unknown key (a site policy holds %s)", strings.Join(PolicyKeys, ", "))
	}
	return nil
}

// decodeSettings reads the pinned settings: a mapping of setting paths to
// scalar values, each a setting of the experiment (checked on the default
// configuration) and none of the site's own.
func (p *SitePolicy) decodeSettings(v *yaml.Node) error {
	if v.Kind != yaml.MappingNode {
		return errors.New("want a mapping of setting paths to values (fedotp.avg_prompt: 1)")
	}
	def, err := config.Compose(config.Sources{})
	if err != nil {
		return err
	}
	p.Settings = map[string]string{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		path, val := v.Content[i].Value, v.Content[i+1]
		if val.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s: want a single value", path)
		}
		if config.IsSiteLocal(path) {
			return fmt.Errorf("%s is the site's own setting, never the coordinator's: set it with --set", path)
		}
		if err := def.Clone().Set(path, val.Value); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		p.Settings[path] = val.Value
	}
	return nil
}

// name is how messages name a policy key: the flag, or the key of the
// policy file that set it.
func (p SitePolicy) name(key, flag string) string {
	if slices.Contains(p.FileKeys, key) {
		return key + " of the policy " + p.File
	}
	return flag
}

// pinsName names the policy that pins settings.
func (p SitePolicy) pinsName() string {
	if p.File != "" {
		return "the policy " + p.File
	}
	return "the site's policy"
}

// checkPins refuses an experiment whose settings differ from the pinned
// ones (pins in the section of a method e does not run are ignored).
func (p SitePolicy) checkPins(e *config.Experiment) error {
	own := e.Settings()
	for _, path := range slices.Sorted(maps.Keys(p.Settings)) {
		section, _, _ := strings.Cut(path, ".")
		if slices.Contains(config.Methods(), section) && !slices.Contains(e.Methods, section) {
			continue
		}
		pinned := e.Clone()
		if err := pinned.Set(path, p.Settings[path]); err != nil {
			return &TaskRefusal{fmt.Sprintf("%s pins %s=%s, which this task cannot take: %v", p.pinsName(), path, p.Settings[path], err)}
		}
		if !slices.Equal(pinned.Settings(), own) {
			return &TaskRefusal{fmt.Sprintf("the task sets %s to %s; %s pins it to %s (it decides what the site shares)",
				path, settingValue(own, path), p.pinsName(), p.Settings[path])}
		}
	}
	return nil
}

// settingValue is path's value among settings lines ("key=value"), or
// "its zero value" when the line is absent.
func settingValue(lines []string, path string) string {
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, path+"="); ok {
			return v
		}
	}
	return "its zero value"
}

// maxBytes is a MiB limit in bytes (0: none).
func maxBytes(mib float64) int64 {
	if mib <= 0 {
		return 0
	}
	return max(int64(mib*(1<<20)), 1)
}
