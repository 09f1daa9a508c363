package dataset

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nlpodyssey/gopickle/types"
	"github.com/pfedmma/pfedmma/internal/inputfile"
)

// DomainNetClasses is FedBN's DomainNet 10-class subset, in label order.
var DomainNetClasses = []string{"bird", "feather", "headphones", "ice_cream", "teapot", "tiger", "whale", "windmill", "wine_glass", "zebra"}

// DomainNetSites are DomainNet's domains, in the standard order.
var DomainNetSites = []string{"clipart", "infograph", "painting", "quickdraw", "real", "sketch"}

// OfficeCaltech10Classes is FedBN's Office-Caltech10 class list, in label order.
var OfficeCaltech10Classes = []string{"back_pack", "bike", "calculator", "headphones", "keyboard", "laptop_computer", "monitor", "mouse", "mug", "projector"}

// OfficeCaltech10Sites are Office-Caltech10's domains, in the standard order.
var OfficeCaltech10Sites = []string{"amazon", "caltech", "dslr", "webcam"}

// fedbnSpec describes one of FedBN's multi-domain subsets.
type fedbnSpec struct {
	name    string
	dir     string // folder under DATA holding {site}_{train,test}.*
	classes []string
	sites   []string
}

// listExts are the list-file extensions tried before .pkl, in order.
var listExts = []string{".tsv", ".csv", ".txt"}

// LoadDomainNet reads FedBN's DomainNet subset from root/DomainNet; image
// paths in the lists are relative to root.
func LoadDomainNet(root string, opts Options) (*Dataset, error) {
	return loadFedBN(fedbnSpec{"domainnet", "DomainNet", DomainNetClasses, DomainNetSites}, root, opts)
}

// LoadOfficeCaltech10 reads FedBN's Office-Caltech10 subset from
// root/office_caltech_10; image paths in the lists are relative to root.
func LoadOfficeCaltech10(root string, opts Options) (*Dataset, error) {
	return loadFedBN(fedbnSpec{"office_caltech10", "office_caltech_10", OfficeCaltech10Classes, OfficeCaltech10Sites}, root, opts)
}

func loadFedBN(spec fedbnSpec, root string, opts Options) (*Dataset, error) {
	sites := spec.sites
	if len(opts.Domains) > 0 {
		for _, s := range opts.Domains {
			if !slices.Contains(spec.sites, s) {
				return nil, fmt.Errorf("dataset %s: domain %q: want one of %v", spec.name, s, spec.sites)
			}
		}
		sites = opts.Domains
	}
	labelOf := make(map[string]int, len(spec.classes))
	for i, c := range spec.classes {
		labelOf[c] = i
	}
	d := &Dataset{Name: spec.name, Domains: slices.Clone(sites)}
	for _, c := range spec.classes {
		d.Classes = append(d.Classes, PromptName(c))
	}
	dir := filepath.Join(root, spec.dir)
	realRoot := resolvedRoot(root)
	for dom, site := range sites {
		for _, split := range []string{"train", "test"} {
			file, pairs, err := readSiteList(filepath.Join(dir, site+"_"+split))
			if err != nil {
				return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
			}
			var items []Item
			for i, p := range pairs {
				label, ok := labelOf[p.class]
				if !ok {
					return nil, fmt.Errorf("dataset %s: %s: entry %d: class %q not in %v", spec.name, file, i+1, p.class, spec.classes)
				}
				rel, err := localPath(p.path)
				if err != nil {
					return nil, fmt.Errorf("dataset %s: %s: entry %d: %w (relative to %s)", spec.name, file, i+1, err, root)
				}
				items = append(items, Item{
					Key:    p.path,
					Label:  label,
					Domain: dom,
					Source: FileSource{Path: filepath.Join(root, rel), Root: realRoot, Decode: opts.Decode},
				})
			}
			if len(items) == 0 {
				return nil, fmt.Errorf("dataset %s: %s: no entries", spec.name, file)
			}
			if split == "train" {
				d.Train = append(d.Train, items...)
			} else {
				d.Test = append(d.Test, items...)
			}
		}
	}
	return d, nil
}

// pathClass is one (relative image path, class name) pair.
type pathClass struct{ path, class string }

// readSiteList reads base+".tsv|.csv|.txt" (first found) or else base+".pkl".
func readSiteList(base string) (string, []pathClass, error) {
	for _, ext := range listExts {
		f := base + ext
		if _, err := os.Stat(f); err == nil {
			pairs, err := readListFile(f, ext)
			return f, pairs, err
		}
	}
	f := base + ".pkl"
	if _, err := os.Stat(f); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return f, nil, fmt.Errorf("no list file %s.{tsv,csv,txt,pkl}: %w", base, fs.ErrNotExist)
		}
		return f, nil, err
	}
	pairs, err := readPathLabelPickle(f)
	return f, pairs, err
}

// readListFile reads "path<sep>class" lines: tab for .tsv, CSV for .csv,
// whitespace with the class last for .txt. Blank lines and lines starting
// with '#' are skipped.
func readListFile(file, ext string) ([]pathClass, error) {
	f, err := inputfile.Open(file)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", file, err)
	}
	defer f.Close()
	var out []pathClass
	if ext == ".csv" {
		r := csv.NewReader(f)
		r.FieldsPerRecord = 2
		r.Comment = '#'
		for {
			rec, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", file, err)
			}
			line, _ := r.FieldPos(0)
			p, c := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
			if p == "" || c == "" {
				return nil, fmt.Errorf("list %s: line %d: empty path or class", file, line)
			}
			out = append(out, pathClass{p, c})
		}
		return out, nil
	}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		var p, c string
		if ext == ".tsv" {
			fields := strings.Split(t, "\t")
			if len(fields) != 2 {
				return nil, fmt.Errorf("list %s: line %d: want \"path<TAB>class\", got %d fields", file, line, len(fields))
			}
			p, c = strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1])
		} else {
			i := strings.LastIndexAny(t, " \t")
			if i < 0 {
				return nil, fmt.Errorf("list %s: line %d: want \"path class\", got %q", file, line, t)
			}
			p, c = strings.TrimSpace(t[:i]), t[i+1:]
		}
		if p == "" || c == "" {
			return nil, fmt.Errorf("list %s: line %d: empty path or class", file, line)
		}
		out = append(out, pathClass{p, c})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", file, err)
	}
	return out, nil
}

// readPathLabelPickle reads FedBN's pickled (paths, text_labels) pair: a
// 2-tuple or 2-list of string sequences, or a (2, N) numpy string array.
func readPathLabelPickle(file string) ([]pathClass, error) {
	v, err := loadPickle(file)
	if err != nil {
		return nil, err
	}
	pairs, err := pathLabelPairs(v)
	if err != nil {
		return nil, fmt.Errorf("pickle %s: %w", file, err)
	}
	return pairs, nil
}

// pathLabelPairs converts the unpickled pair.
func pathLabelPairs(v any) ([]pathClass, error) {
	var err error
	var paths, labels []string
	switch x := v.(type) {
	case *types.Tuple, *types.List:
		seq, _ := pySeq(x)
		if len(seq) != 2 {
			return nil, fmt.Errorf("want a (paths, labels) pair, got %d elements", len(seq))
		}
		if paths, err = pyStrings(seq[0]); err != nil {
			return nil, fmt.Errorf("paths: %w", err)
		}
		if labels, err = pyStrings(seq[1]); err != nil {
			return nil, fmt.Errorf("labels: %w", err)
		}
	case *ndarray:
		if x.dtype == nil || len(x.shape) != 2 || x.shape[0] != 2 {
			return nil, fmt.Errorf("want a (paths, labels) pair or a (2, N) array")
		}
		n := x.shape[1]
		all := make([]string, 2*n)
		for i := range all {
			e, err := x.element(i)
			if err != nil {
				return nil, err
			}
			s, ok := toStr(e)
			if !ok {
				return nil, fmt.Errorf("element %d: want a string, got %T", i, e)
			}
			all[i] = s
		}
		paths, labels = all[:n], all[n:]
	default:
		return nil, fmt.Errorf("want a (paths, labels) pair, got %T", v)
	}
	if len(paths) != len(labels) {
		return nil, fmt.Errorf("%d paths but %d labels", len(paths), len(labels))
	}
	out := make([]pathClass, len(paths))
	for i := range paths {
		out[i] = pathClass{paths[i], labels[i]}
	}
	return out, nil
}
