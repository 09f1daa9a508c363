package docsgen

import (
	"fmt"
	"strings"
)

// File is one markdown file that may hold generated blocks and rows: its
// path (as errors name it) and its text.
type File struct {
	Path string
	Text string
}

// Files reads every markdown file under root that may hold generated blocks:
// README.md, docs/*.md, docs/**/README.md and methods/*/README.md (ScanDocs,
// the same files TestNoHandWrittenNumbers scans), in a stable order; Path
// is root joined with the file's relative path.
func Files(root string) ([]File, error) {
	files, err := ScanDocs(root)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("docsgen: no README.md or docs/*.md under %s", root)
	}
	return files, nil
}

// UpdateFiles returns files with every generated block and row rewritten
// from its rendering. Each block must appear in exactly one file and each
// row's prefix on exactly one line of all of them; a block or row found
// nowhere or twice, or a marker no renderer fills, is an error naming the
// file and the block.
func UpdateFiles(files []File, blocks []Block, rows []Row) ([]File, error) {
	if err := checkPlaced(files, blocks); err != nil {
		return nil, err
	}
	where, err := placeRows(files, rows)
	if err != nil {
		return nil, err
	}
	byName := index(blocks)
	out := make([]File, len(files))
	for i, f := range files {
		text, _, err := replaceBlocks(f.Text, byName)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if text, err = UpdateRows(text, where[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		out[i] = File{Path: f.Path, Text: text}
	}
	return out, nil
}

// DiffFiles names each block and row whose text in files differs from its
// evidence, with the file it lives in; nil when every one agrees. The
// placement errors of UpdateFiles are errors here too.
func DiffFiles(files []File, blocks []Block, rows []Row) ([]string, error) {
	if err := checkPlaced(files, blocks); err != nil {
		return nil, err
	}
	where, err := placeRows(files, rows)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for i, f := range files {
		d, err := Diff(f.Text, blocks)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		rd, err := DiffRows(f.Text, where[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		for _, s := range append(d, rd...) {
			diffs = append(diffs, f.Path+": "+s)
		}
	}
	return diffs, nil
}

// checkPlaced requires every rendered block in exactly one file, and every
// block in the files to be rendered.
func checkPlaced(files []File, blocks []Block) error {
	byName := index(blocks)
	in := map[string]string{}
	for _, f := range files {
		spans, err := findBlocks(f.Text)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		for _, s := range spans {
			if _, ok := byName[s.name]; !ok {
				return fmt.Errorf("%s: generated block %q: no renderer produces it", f.Path, s.name)
			}
			if prev, ok := in[s.name]; ok {
				return fmt.Errorf("generated block %q appears in %s and in %s", s.name, prev, f.Path)
			}
			in[s.name] = f.Path
		}
	}
	found := make(map[string]bool, len(in))
	for name := range in {
		found[name] = true
	}
	if err := checkAllFound(blocks, found); err != nil {
		return fmt.Errorf("%s: %w", fileList(files), err)
	}
	return nil
}

// placeRows assigns each row to the one file that holds its prefix.
func placeRows(files []File, rows []Row) ([][]Row, error) {
	where := make([][]Row, len(files))
	for _, r := range rows {
		at := -1
		for i, f := range files {
			n := countPrefix(f.Text, r.Prefix)
			if n > 1 {
				return nil, fmt.Errorf("%s: row %q (from %s) appears on %d lines", f.Path, r.Prefix, r.Source, n)
			}
			if n == 1 && at >= 0 {
				return nil, fmt.Errorf("row %q (from %s) appears in %s and in %s", r.Prefix, r.Source, files[at].Path, f.Path)
			}
			if n == 1 {
				at = i
			}
		}
		if at < 0 {
			return nil, fmt.Errorf("%s: row %q (from %s) not found", fileList(files), r.Prefix, r.Source)
		}
		where[at] = append(where[at], r)
	}
	return where, nil
}

func countPrefix(text, prefix string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " "), prefix) {
			n++
		}
	}
	return n
}

func fileList(files []File) string {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Path
	}
	if len(names) > 4 {
		return strings.Join(names[:4], ", ") + fmt.Sprintf(" and %d more files", len(names)-4)
	}
	return strings.Join(names, ", ")
}
