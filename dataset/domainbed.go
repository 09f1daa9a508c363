package dataset

import (
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// DomainBed layout
//
// PACS, Office-Home, VLCS and TerraIncognita are read in the layout
// DomainBed's download script leaves behind:
//
//	pacs             DATA/PACS/{art_painting,cartoon,photo,sketch}/<class>/*.jpg
//	office_home      DATA/office_home/{Art,Clipart,Product,Real World}/<class>/*.jpg
//	vlcs             DATA/VLCS/{Caltech101,LabelMe,SUN09,VOC2007}/<class>/*.jpg
//	terra_incognita  DATA/terra_incognita/{location_100,location_38,location_43,location_46}/<class>/*.jpg
//
// Images may sit in sub-folders of a class folder (torchvision's ImageFolder
// walks them too). Folder names are matched to the preset ignoring case,
// spaces, '_' and '-' ("Real World", "Real_World" and "RealWorld" are one
// domain; "ToothBrush" and "Toothbrush" one class); a dataset folder whose
// domains or classes differ from the preset is an error that names the
// folder and lists what was found.
//
// These datasets ship no split: from every (domain, class) folder
// [DomainBedTestFraction] of the images (rounded half to even) are held out
// for Test, chosen by a generator seeded with [Options.Seed] and the
// domain and class names, so that a domain's split does not depend on which
// other domains are loaded. [Options.ValFraction] then carves Val out of the
// rest (FedOT's 60/20/20 split is ValFraction 0.25). Labels follow the
// sorted class folder names, as ImageFolder numbers them; domains follow the
// preset order (DomainBed's sorted environment folders) unless
// [Options.Domains] selects some.

// DomainBedTestFraction is the fraction of each (domain, class) folder held
// out for Test by the DomainBed loaders (DomainBed's holdout_fraction).
const DomainBedTestFraction = 0.2

// domainBedSpec is one DomainBed dataset preset.
type domainBedSpec struct {
	name    string
	dirs    []string // candidate folders under DATA, first found wins
	domains []string // canonical domain names, in DomainBed's order
	classes []string // canonical class folder names, in label order
}

// PACSDomains, PACSClasses, ... are the presets of the DomainBed datasets:
// domain names in DomainBed's (sorted folder) order and class folder names in
// label order.
var (
	PACSDomains = []string{"art_painting", "cartoon", "photo", "sketch"}
	PACSClasses = []string{"dog", "elephant", "giraffe", "guitar", "horse", "house", "person"}

	OfficeHomeDomains = []string{"Art", "Clipart", "Product", "Real World"}
	OfficeHomeClasses = []string{"Alarm_Clock", "Backpack", "Batteries", "Bed", "Bike", "Bottle", "Bucket",
		"Calculator", "Calendar", "Candles", "Chair", "Clipboards", "Computer", "Couch", "Curtains", "Desk_Lamp",
		"Drill", "Eraser", "Exit_Sign", "Fan", "File_Cabinet", "Flipflops", "Flowers", "Folder", "Fork", "Glasses",
		"Hammer", "Helmet", "Kettle", "Keyboard", "Knives", "Lamp_Shade", "Laptop", "Marker", "Monitor", "Mop",
		"Mouse", "Mug", "Notebook", "Oven", "Pan", "Paper_Clip", "Pen", "Pencil", "Postit_Notes", "Printer",
		"Push_Pin", "Radio", "Refrigerator", "Ruler", "Scissors", "Screwdriver", "Shelf", "Sink", "Sneakers",
		"Soda", "Speaker", "Spoon", "TV", "Table", "Telephone", "ToothBrush", "Toys", "Trash_Can", "Webcam"}

	VLCSDomains = []string{"Caltech101", "LabelMe", "SUN09", "VOC2007"}
	VLCSClasses = []string{"bird", "car", "chair", "dog", "person"}

	TerraIncognitaDomains = []string{"location_100", "location_38", "location_43", "location_46"}
	TerraIncognitaClasses = []string{"bird", "bobcat", "cat", "coyote", "dog", "empty", "opossum", "rabbit", "raccoon", "squirrel"}
)

var (
	pacsSpec       = domainBedSpec{"pacs", []string{"PACS", "pacs"}, PACSDomains, PACSClasses}
	officeHomeSpec = domainBedSpec{"office_home", []string{"office_home", "OfficeHome", "OfficeHomeDataset_10072016"}, OfficeHomeDomains, OfficeHomeClasses}
	vlcsSpec       = domainBedSpec{"vlcs", []string{"VLCS", "vlcs"}, VLCSDomains, VLCSClasses}
	terraSpec      = domainBedSpec{"terra_incognita", []string{"terra_incognita", "TerraIncognita"}, TerraIncognitaDomains, TerraIncognitaClasses}
)

func init() {
	for _, s := range []domainBedSpec{pacsSpec, officeHomeSpec, vlcsSpec, terraSpec} {
		if err := Register(s.name, func(root string, opts Options) (*Dataset, error) { return loadDomainBed(s, root, opts) }); err != nil {
			panic(err) // a programming error: two loaders under one name
		}
	}
}

// LoadPACS reads PACS from DATA/PACS in the DomainBed layout.
func LoadPACS(root string, opts Options) (*Dataset, error) {
	return loadDomainBed(pacsSpec, root, opts)
}

// LoadOfficeHome reads Office-Home from DATA/office_home in the DomainBed
// layout; its "Real World" domain folder has a space.
func LoadOfficeHome(root string, opts Options) (*Dataset, error) {
	return loadDomainBed(officeHomeSpec, root, opts)
}

// LoadVLCS reads VLCS from DATA/VLCS in the DomainBed layout.
func LoadVLCS(root string, opts Options) (*Dataset, error) {
	return loadDomainBed(vlcsSpec, root, opts)
}

// LoadTerraIncognita reads TerraIncognita from DATA/terra_incognita in the
// DomainBed layout.
func LoadTerraIncognita(root string, opts Options) (*Dataset, error) {
	return loadDomainBed(terraSpec, root, opts)
}

// FoldName is the key domain and folder names are matched by: lower case
// without spaces, '_' and '-' ("real_world" and "Real World" fold alike).
func FoldName(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '_', '-':
			return -1
		}
		return r
	}, strings.ToLower(s))
}

// subfolders lists the visible sub-folders of dir, sorted.
func subfolders(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") && (e.IsDir() || e.Type()&fs.ModeSymlink != 0 && isDir(filepath.Join(dir, e.Name()))) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// matchFolders maps each wanted name to the folder among found that has
// the same [FoldName]. It fails, listing what was found, when a wanted name
// has no folder or when a folder matches none of the allowed names.
func matchFolders(what, dir string, wanted, allowed, found []string) (map[string]string, error) {
	byKey := map[string]string{}
	for _, f := range found {
		k := FoldName(f)
		if prev, ok := byKey[k]; ok {
			return nil, fmt.Errorf("%s: folders %q and %q name the same %s", dir, prev, f, what)
		}
		byKey[k] = f
	}
	out := map[string]string{}
	var missing, extra []string
	for _, w := range wanted {
		if f, ok := byKey[FoldName(w)]; ok {
			out[w] = f
		} else {
			missing = append(missing, w)
		}
	}
	for _, f := range found {
		if !slices.ContainsFunc(allowed, func(a string) bool { return FoldName(a) == FoldName(f) }) {
			extra = append(extra, f)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		msg := fmt.Sprintf("%s: found %ss %q, want the preset %q", dir, what, found, allowed)
		if len(missing) > 0 {
			msg += fmt.Sprintf("; missing %q", missing)
		}
		if len(extra) > 0 {
			msg += fmt.Sprintf("; unexpected %q", extra)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	return out, nil
}

// walkImages lists the image files under dir (recursively) as
// '/'-separated paths relative to dir, sorted.
func walkImages(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if isImageFile(d.Name()) {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// findDomainBedDir returns the first candidate folder under root.
func findDomainBedDir(spec domainBedSpec, root string) (string, error) {
	for _, c := range spec.dirs {
		if d := filepath.Join(root, c); isDir(d) {
			return d, nil
		}
	}
	found, err := subfolders(root)
	if err != nil {
		return "", fmt.Errorf("dataset %s: root %s: %w", spec.name, root, err)
	}
	return "", fmt.Errorf("dataset %s: no folder %q under %s (found %q)", spec.name, spec.dirs, root, found)
}

// selectDomains returns the preset domains named by sel (matched by
// [FoldName]), or all of them when sel is empty.
func selectDomains(name string, preset, sel []string) ([]string, error) {
	if len(sel) == 0 {
		return slices.Clone(preset), nil
	}
	out := make([]string, 0, len(sel))
	for _, s := range sel {
		i := slices.IndexFunc(preset, func(p string) bool { return FoldName(p) == FoldName(s) })
		if i < 0 {
			return nil, fmt.Errorf("dataset %s: domain %q: want one of %q", name, s, preset)
		}
		if slices.Contains(out, preset[i]) {
			return nil, fmt.Errorf("dataset %s: domain %q selected twice", name, s)
		}
		out = append(out, preset[i])
	}
	return out, nil
}

// holdOutRand seeds the test hold-out of one (domain, class) folder.
func holdOutRand(seed uint64, domain, class string) interface{ Shuffle(int, func(int, int)) } {
	h := fnv.New64a()
	h.Write([]byte(FoldName(domain)))
	h.Write([]byte{0})
	h.Write([]byte(FoldName(class)))
	return newRand(seed, streamDomainBed^h.Sum64())
}

// streamDomainBed separates the DomainBed hold-out from the package's other
// generators.
const streamDomainBed uint64 = 0x646f6d61696e6264

// loadDomainBed reads one DomainBed dataset.
func loadDomainBed(spec domainBedSpec, root string, opts Options) (*Dataset, error) {
	dir, err := findDomainBedDir(spec, root)
	if err != nil {
		return nil, err
	}
	domains, err := selectDomains(spec.name, spec.domains, opts.Domains)
	if err != nil {
		return nil, err
	}
	found, err := subfolders(dir)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
	}
	domDirs, err := matchFolders("domain", dir, domains, spec.domains, found)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
	}
	d := &Dataset{Name: spec.name, Domains: domains}
	for _, c := range spec.classes {
		d.Classes = append(d.Classes, PromptName(c))
	}
	for di, dom := range domains {
		ddir := filepath.Join(dir, domDirs[dom])
		cfound, err := subfolders(ddir)
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
		}
		classDirs, err := matchFolders("class", ddir, spec.classes, spec.classes, cfound)
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
		}
		for label, c := range spec.classes {
			cdir := filepath.Join(ddir, classDirs[c])
			imgs, err := walkImages(cdir)
			if err != nil {
				return nil, fmt.Errorf("dataset %s: %w", spec.name, err)
			}
			if len(imgs) == 0 {
				return nil, fmt.Errorf("dataset %s: %s: no images", spec.name, cdir)
			}
			nTest := roundHalfEven(float64(len(imgs)) * DomainBedTestFraction)
			order := make([]int, len(imgs))
			for i := range order {
				order[i] = i
			}
			holdOutRand(opts.Seed, dom, c).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			test := make([]bool, len(imgs))
			for _, i := range order[:nTest] {
				test[i] = true
			}
			for i, im := range imgs {
				rel := path.Join(domDirs[dom], classDirs[c], im)
				it := Item{Key: rel, Label: label, Domain: di,
					Source: FileSource{Path: filepath.Join(dir, filepath.FromSlash(rel)), Decode: opts.Decode}}
				if test[i] {
					d.Test = append(d.Test, it)
				} else {
					d.Train = append(d.Train, it)
				}
			}
		}
	}
	return d, nil
}
