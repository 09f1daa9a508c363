package dataset

import (
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
)

// LoadImageFolder reads a class-per-folder tree. With root/train (and
// optionally root/val, root/test) each split is read from its folder and the
// class list is the sorted union of class folder names; otherwise the class
// folders sit directly under root and each class is split 50/20/30
// (train/val/test) with [Options.Seed], as CoOp does. Keys are paths relative
// to root; class names are folder names with '_' replaced by a space.
func LoadImageFolder(root string, opts Options) (*Dataset, error) {
	name := "imagefolder"
	if !isDir(root) {
		return nil, fmt.Errorf("dataset %s: root %s: not a folder", name, root)
	}
	realRoot := resolvedRoot(root)
	src := func(rel string) ImageSource {
		return FileSource{Path: filepath.Join(root, filepath.FromSlash(rel)), Root: realRoot, Decode: opts.Decode}
	}
	if isDir(filepath.Join(root, "train")) {
		splits := map[string]map[string][]string{} // split -> class -> rel paths
		classSet := map[string]bool{}
		for _, sp := range []string{"train", "val", "test"} {
			dir := filepath.Join(root, sp)
			if !isDir(dir) {
				continue
			}
			byClass, err := readClassFolders(dir, sp)
			if err != nil {
				return nil, fmt.Errorf("dataset %s: %w", name, err)
			}
			splits[sp] = byClass
			for c := range byClass {
				classSet[c] = true
			}
		}
		classes := slices.Sorted(maps.Keys(classSet))
		if len(classes) == 0 {
			return nil, fmt.Errorf("dataset %s: %s: no class folders with images", name, filepath.Join(root, "train"))
		}
		d := &Dataset{Name: name, Domains: []string{name}}
		for _, c := range classes {
			d.Classes = append(d.Classes, PromptName(c))
		}
		for label, c := range classes {
			for _, f := range []struct {
				sp  string
				dst *[]Item
			}{{"train", &d.Train}, {"val", &d.Val}, {"test", &d.Test}} {
				for _, rel := range splits[f.sp][c] {
					*f.dst = append(*f.dst, Item{Key: rel, Label: label, Source: src(rel)})
				}
			}
		}
		return d, nil
	}
	classes, err := immediateClassDirs(nil, nil)(root)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", name, err)
	}
	// Folders without images (e.g. a stray "split_fewshot") are not classes.
	classes = slices.DeleteFunc(classes, func(c folderClass) bool {
		imgs, err := listImages(filepath.Join(root, c.rel))
		return err == nil && len(imgs) == 0
	})
	split, err := folderSplit(func(string) ([]folderClass, error) { return classes, nil })(root, root, opts.Seed)
	if err != nil {
		return nil, fmt.Errorf("dataset %s: %w", name, err)
	}
	d := &Dataset{Name: name, Domains: []string{name}}
	for _, c := range classes {
		d.Classes = append(d.Classes, PromptName(c.name))
	}
	items := func(es []SplitEntry) []Item {
		out := make([]Item, len(es))
		for i, e := range es {
			out[i] = Item{Key: e.Path, Label: e.Label, Source: src(e.Path)}
		}
		return out
	}
	d.Train, d.Val, d.Test = items(split.Train), items(split.Val), items(split.Test)
	return d, nil
}

// readClassFolders maps each class folder inside dir to the '/'-separated
// paths (relative to dir's parent, prefixed with prefix) of its images.
func readClassFolders(dir, prefix string) (map[string][]string, error) {
	classes, err := immediateClassDirs(nil, nil)(dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, c := range classes {
		imgs, err := listImages(filepath.Join(dir, c.rel))
		if err != nil {
			return nil, err
		}
		for _, im := range imgs {
			out[c.rel] = append(out[c.rel], path.Join(prefix, c.rel, im))
		}
	}
	return out, nil
}
