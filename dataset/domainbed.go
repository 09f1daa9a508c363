package dataset

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// domainBed describes one of DomainBed's multi-domain datasets, laid out as
// ROOT/<folder>/<domain>/<class>/<image>.
type domainBed struct {
	folder  string
	domains []string
}

// domainBedSets are the DomainBed datasets pfedmma reads.
var domainBedSets = map[string]domainBed{
	"pacs":            {"PACS", []string{"art_painting", "cartoon", "photo", "sketch"}},
	"vlcs":            {"VLCS", []string{"Caltech101", "LabelMe", "SUN09", "VOC2007"}},
	"office_home":     {"office_home", []string{"Art", "Clipart", "Product", "Real World"}},
	"terra_incognita": {"terra_incognita", []string{"location_100", "location_38", "location_43", "location_46"}},
}

// DomainBedTestFraction is the share of each domain's images of each class
// held out for testing: DomainBed's datasets ship no split, and DomainBed
// holds out 20%.
const DomainBedTestFraction = 0.2

func init() {
	for name, spec := range domainBedSets {
		if err := Register(name, func(root string, opts Options) (*Dataset, error) { return loadDomainBed(name, spec, root, opts) }); err != nil {
			panic(err)
		}
	}
}

// loadDomainBed reads ROOT/<folder>/<domain>/<class>/*: classes are the
// sorted union of the class folders (every domain must hold the same
// classes), and per domain and class a seeded 20% of the images
// ([Options.Seed]) is the test split, the rest training.
func loadDomainBed(name string, spec domainBed, root string, opts Options) (*Dataset, error) {
	base := filepath.Join(root, spec.folder)
	if !isDir(base) {
		return nil, fmt.Errorf("dataset %s: %s: not a folder (want %s/<domain>/<class>/<image>)", name, base, spec.folder)
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", name, err)
	}
	var found []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			found = append(found, e.Name())
		}
	}
	domains := spec.domains
	if len(opts.Domains) > 0 {
		domains = opts.Domains
	}
	for _, d := range domains {
		if !slices.Contains(found, d) {
			return nil, fmt.Errorf("dataset %s: %s has no domain folder %q (found: %s; %s's domains are %s)",
				name, base, d, strings.Join(found, ", "), name, strings.Join(spec.domains, ", "))
		}
	}
	realRoot := resolvedRoot(root)
	perDomain := make([]map[string][]string, len(domains))
	classSet := map[string]bool{}
	for i, d := range domains {
		byClass, err := readClassFolders(filepath.Join(base, d), path.Join(spec.folder, d))
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", name, err)
		}
		if len(byClass) == 0 {
			return nil, fmt.Errorf("dataset %s: %s: no class folders with images", name, filepath.Join(base, d))
		}
		perDomain[i] = byClass
		for c := range byClass {
			classSet[c] = true
		}
	}
	classes := slices.Sorted(maps.Keys(classSet))
	for i, byClass := range perDomain {
		if len(byClass) != len(classes) {
			var missing []string
			for _, c := range classes {
				if _, ok := byClass[c]; !ok {
					missing = append(missing, c)
				}
			}
			return nil, fmt.Errorf("dataset %s: domain %s lacks the class folders %s that other domains have", name, filepath.Join(base, domains[i]), strings.Join(missing, ", "))
		}
	}
	d := &Dataset{Name: name, Domains: slices.Clone(domains)}
	for _, c := range classes {
		d.Classes = append(d.Classes, PromptName(c))
	}
	for di, byClass := range perDomain {
		for label, c := range classes {
			files := slices.Clone(byClass[c])
			slices.Sort(files)
			r := rand.New(rand.NewPCG(opts.Seed, uint64(di)<<32|uint64(label)))
			r.Shuffle(len(files), func(a, b int) { files[a], files[b] = files[b], files[a] })
			nTest := int(float64(len(files))*DomainBedTestFraction + 0.5)
			for k, rel := range files {
				it := Item{Key: rel, Label: label, Domain: di,
					Source: FileSource{Path: filepath.Join(root, filepath.FromSlash(rel)), Root: realRoot, Decode: opts.Decode}}
				if k < nTest {
					d.Test = append(d.Test, it)
				} else {
					d.Train = append(d.Train, it)
				}
			}
		}
	}
	return d, nil
}
