package dataset

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DomainNetFullClasses is the number of classes of the full DomainNet, as
// its official lists number them.
const DomainNetFullClasses = 345

// domainNetFullDirs are the folders searched, in order, for DomainNet's
// official <domain>_{train,test}.txt lists.
var domainNetFullDirs = []string{"DomainNet", "domain_net", "domainnet", "."}

// loadDomainNetAny is the "domainnet" loader: the full DomainNet from its
// official lists when they are present ([LoadDomainNetFull]), otherwise
// FedBN's 10-class subset ([LoadDomainNet]).
func loadDomainNetAny(root string, opts Options) (*Dataset, error) {
	if dir, ok := findDomainNetFull(root, opts); ok {
		return loadDomainNetFull(dir, opts)
	}
	return LoadDomainNet(root, opts)
}

// findDomainNetFull returns the folder holding the official lists: the first
// of DATA/DomainNet, DATA/domain_net, DATA/domainnet and DATA whose
// <domain>_train.txt (first selected domain) has "<path> <integer label>"
// lines. FedBN's .txt lists end in a class name and are not taken.
func findDomainNetFull(root string, opts Options) (string, bool) {
	sites, err := selectDomains("domainnet", DomainNetSites, opts.Domains)
	if err != nil {
		return "", false
	}
	site := sites[0]
	for _, c := range domainNetFullDirs {
		dir := filepath.Join(root, c)
		if isOfficialList(filepath.Join(dir, site+"_train.txt")) {
			return dir, true
		}
	}
	return "", false
}

// isOfficialList reports whether file's first non-blank line ends in an
// integer.
func isOfficialList(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		_, err := strconv.Atoi(fields[len(fields)-1])
		return len(fields) >= 2 && err == nil
	}
	return false
}

// LoadDomainNetFull reads the full DomainNet (345 classes, six domains) from
// its official lists <domain>_train.txt and <domain>_test.txt in dir, one
// "<domain>/<class>/<file> <label>" line each, paths relative to dir. Class
// names come from the class folder of each label; a label naming two
// folders, labels that do not cover 0..344, or a path leaving dir are errors
// naming the file and line.
func LoadDomainNetFull(dir string, opts Options) (*Dataset, error) {
	return loadDomainNetFull(dir, opts)
}

func loadDomainNetFull(dir string, opts Options) (*Dataset, error) {
	const name = "domainnet"
	sites, err := selectDomains(name, DomainNetSites, opts.Domains)
	if err != nil {
		return nil, err
	}
	d := &Dataset{Name: name, Domains: sites}
	classOf := map[int]string{}
	where := map[int]string{} // label -> file:line that named it first
	for dom, site := range sites {
		for _, split := range []string{"train", "test"} {
			file := filepath.Join(dir, site+"_"+split+".txt")
			items, err := readOfficialList(file, dir, dom, classOf, where, opts)
			if err != nil {
				return nil, fmt.Errorf("dataset %s: %w", name, err)
			}
			if len(items) == 0 {
				return nil, fmt.Errorf("dataset %s: %s: no entries", name, file)
			}
			if split == "train" {
				d.Train = append(d.Train, items...)
			} else {
				d.Test = append(d.Test, items...)
			}
		}
	}
	var missing []int
	for l := range DomainNetFullClasses {
		if _, ok := classOf[l]; !ok {
			missing = append(missing, l)
		}
	}
	if len(classOf) != DomainNetFullClasses || len(missing) > 0 {
		if len(missing) > 10 {
			missing = missing[:10]
		}
		return nil, fmt.Errorf("dataset %s: lists in %s name %d classes, want %d (labels 0..%d; first missing %v)",
			name, dir, len(classOf), DomainNetFullClasses, DomainNetFullClasses-1, missing)
	}
	d.Classes = make([]string, DomainNetFullClasses)
	labelOf := map[string]int{}
	for l := range d.Classes {
		if prev, ok := labelOf[classOf[l]]; ok {
			return nil, fmt.Errorf("dataset %s: class %q has labels %d (%s) and %d (%s)", name, classOf[l], prev, where[prev], l, where[l])
		}
		labelOf[classOf[l]] = l
		d.Classes[l] = PromptName(classOf[l])
	}
	return d, nil
}

// readOfficialList reads one official list, recording each label's class
// folder in classOf.
func readOfficialList(file, dir string, dom int, classOf map[int]string, where map[int]string, opts Options) ([]Item, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", file, err)
	}
	defer f.Close()
	var items []Item
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" {
			continue
		}
		at := fmt.Sprintf("%s:%d", file, line)
		i := strings.LastIndexAny(t, " \t")
		if i < 0 {
			return nil, fmt.Errorf("list %s: want \"<path> <label>\", got %q", at, t)
		}
		p, ls := strings.TrimSpace(t[:i]), t[i+1:]
		label, err := strconv.Atoi(ls)
		if err != nil || label < 0 || label >= DomainNetFullClasses {
			return nil, fmt.Errorf("list %s: label %q: want an integer in [0,%d)", at, ls, DomainNetFullClasses)
		}
		if !filepath.IsLocal(filepath.FromSlash(p)) || strings.Contains(p, `\`) {
			return nil, fmt.Errorf("list %s: path %q must stay inside %s", at, p, dir)
		}
		parts := strings.Split(p, "/")
		if len(parts) < 3 {
			return nil, fmt.Errorf("list %s: path %q: want <domain>/<class>/<file>", at, p)
		}
		class := parts[1]
		if prev, ok := classOf[label]; !ok {
			classOf[label], where[label] = class, at
		} else if prev != class {
			return nil, fmt.Errorf("list %s: label %d is class %q, but %s gave it to %q", at, label, class, where[label], prev)
		}
		items = append(items, Item{Key: p, Label: label, Domain: dom,
			Source: FileSource{Path: filepath.Join(dir, filepath.FromSlash(p)), Decode: opts.Decode}})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", file, err)
	}
	return items, nil
}
