package deploy

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/pfedmma/pfedmma/config"
	"github.com/pfedmma/pfedmma/transport"
)

// PolicyFlags maps the flags that are shorthands of the site policy's keys
// to those keys.
var PolicyFlags = map[string]string{"accept-methods": policyMethods, "max-upload-mib": policyMaxUpload, "max-download-mib": policyMaxDownload,
	"require-secure-aggregation": policyRequireSecure, "min-participants": policyMinPart}

// CompleteSitePolicy completes p, the policy its shorthand flags give, with
// the policy file (none when empty; a key given both as a flag, changed(flag)
// true, and in the file is an error) and checks it.
func CompleteSitePolicy(p *SitePolicy, file string, changed func(flag string) bool) error {
	if file != "" {
		if err := mergePolicyFile(p, file, changed); err != nil {
			return err
		}
	}
	for _, f := range []struct {
		flag string
		v    float64
	}{{"max-upload-mib", p.MaxUploadMiB}, {"max-download-mib", p.MaxDownloadMiB}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("--%s %g: want a size in MiB ≥ 0", f.flag, f.v)
		}
	}
	if p.MinParticipants < 0 {
		return fmt.Errorf("--min-participants %d: want a number of sites ≥ 0", p.MinParticipants)
	}
	for _, m := range p.AcceptMethods {
		if !slices.Contains(config.Methods(), m) {
			return fmt.Errorf("--accept-methods: %q is no method (pfedmma methods lists them)", m)
		}
	}
	return nil
}

// mergePolicyFile sets p's keys that the policy file sets, refusing a key
// also given by its flag.
func mergePolicyFile(p *SitePolicy, file string, changed func(flag string) bool) error {
	var fromFile SitePolicy
	keys, err := LoadSitePolicy(file, &fromFile)
	if err != nil {
		return err
	}
	for _, flag := range slices.Sorted(maps.Keys(PolicyFlags)) {
		if key := PolicyFlags[flag]; changed(flag) && slices.Contains(keys, key) {
			return fmt.Errorf("--%s and the key %s of --policy %s both given: keep one", flag, key, file)
		}
	}
	for _, key := range keys {
		switch key {
		case policyMethods:
			p.AcceptMethods = fromFile.AcceptMethods
		case policyMaxUpload:
			p.MaxUploadMiB = fromFile.MaxUploadMiB
		case policyMaxDownload:
			p.MaxDownloadMiB = fromFile.MaxDownloadMiB
		case policyRequireSecure:
			p.RequireSecureAggregation = fromFile.RequireSecureAggregation
		case policyMinPart:
			p.MinParticipants = fromFile.MinParticipants
		}
	}
	p.Settings, p.File, p.FileKeys = fromFile.Settings, fromFile.File, fromFile.FileKeys
	return nil
}

// SiteSets are a site's --set overrides sorted: the site-local ones (Local),
// the model and vocabulary they name, and whether any other key makes the
// experiment the site's own (then the coordinator checks it is the same).
type SiteSets struct {
	Local        []string
	Model, Vocab string
	Own          bool
}

// ParseSiteSets sorts a site's --set overrides.
func ParseSiteSets(sets []string) (SiteSets, error) {
	var s SiteSets
	for _, kv := range sets {
		path, value, err := config.ParseSet(kv)
		if err != nil {
			return SiteSets{}, fmt.Errorf("--set %s: %w", kv, err)
		}
		switch path {
		case "model":
			s.Model = value
		case "vocab":
			s.Vocab = value
		}
		if config.IsSiteLocal(path) {
			s.Local = append(s.Local, kv)
		} else {
			s.Own = true
		}
	}
	return s, nil
}

// WriteSiteDone says that site name (client id) is done, its results in
// state; over, when set, is the record of a federation that had already
// finished, kept in overFile: the site did nothing.
func WriteSiteDone(w io.Writer, name string, id int, state string, over *transport.FederationOver, overFile string) {
	if over == nil {
		fmt.Fprintf(w, "site %s (client %d) done; its parameters and metrics are in %s\n", name, id, state)
		return
	}
	fmt.Fprintf(w, "site %s (client %d): the federation of the coordinator at %s is over (it finished at %s, as recorded in %s): nothing to do; its parameters and metrics are in %s (to join a new federation, give another --state or remove that file)\n",
		name, id, over.Server, over.At.Format(time.RFC3339), overFile, state)
}
