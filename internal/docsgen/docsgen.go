// Package docsgen renders the documentation's blocks of measured numbers
// from the JSON evidence under docs/, and checks or rewrites those blocks in
// place, in every markdown file that holds them (Files: README.md, docs/*.md,
// docs/**/README.md and methods/*/README.md).
//
// A generated block sits between two marker comments,
//
//	<!-- generated:NAME (make docs; from SOURCE) --> … <!-- /generated:NAME -->
//
// and everything between them is what Render produces from the evidence:
// `make docs` rewrites it (UpdateFiles), and the package's test fails when a
// file differs (DiffFiles), so a number in a block cannot drift from its
// evidence. Each block lives in exactly one file.
// Table rows that cannot hold markers (the compression table's re-measured
// CLIP-LoRA rows) are found by their first cells instead (RenderRows).
//
// The evidence: docs/sitting/table.json and the sitting files it names (the
// table "Every method against its authors' code", its summary sentences and
// the single runs quoted beside it, and each method's row alone as block
// speed-METHOD for its methods/NAME/README.md), docs/sitting/3 (the engine and round
// tables of "Performance"), docs/defaultjob (the default job in fp32 and
// bf16), docs/fullbackprop (world-compare's full-backpropagation methods in
// fp32 and bf16), docs/compress (CLIP-LoRA's compressed-update rows) and
// docs/paperscale (the paper-scale projection's tables).
package docsgen

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Block is one generated part of the README: its name, the evidence it is
// rendered from (named in the opening marker) and its exact text.
type Block struct {
	Name   string
	Source string
	Body   string
}

// Render produces every generated block from the evidence under docsDir
// (the repository's docs/ folder).
func Render(docsDir string) ([]Block, error) {
	tab, err := LoadSittingTable(docsDir)
	if err != nil {
		return nil, err
	}
	dj, err := defaultJobBlocks(docsDir)
	if err != nil {
		return nil, err
	}
	eng, err := engineBlocks(docsDir)
	if err != nil {
		return nil, err
	}
	fb, err := fullBackpropBlocks(docsDir)
	if err != nil {
		return nil, err
	}
	ps, err := paperScaleBlock(docsDir)
	if err != nil {
		return nil, err
	}
	cs, err := compressSummaryBlock(docsDir)
	if err != nil {
		return nil, err
	}
	blocks := append(append(append(append(tab.Blocks(), dj...), eng...), fb...), ps, cs)
	for _, rel := range runBlocks {
		b, err := RunBlock(docsDir, rel)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

var openMarker = regexp.MustCompile(`<!-- generated:([a-z0-9-]+) \(make docs; from [^)]*\) -->`)

func closeMarker(name string) string { return "<!-- /generated:" + name + " -->" }

func openText(b Block) string {
	return "<!-- generated:" + b.Name + " (make docs; from " + b.Source + ") -->"
}

// span is the position of one block in a README: the opening marker's start
// and the closing marker's end.
type span struct {
	name       string
	start, end int
}

func findBlocks(readme string) ([]span, error) {
	if n, m := strings.Count(readme, "<!-- generated:"), len(openMarker.FindAllStringIndex(readme, -1)); n != m {
		return nil, fmt.Errorf("%d of %d opening markers are not of the form %s", n-m, n, "<!-- generated:NAME (make docs; from SOURCE) -->")
	}
	var spans []span
	seen := map[string]bool{}
	for _, m := range openMarker.FindAllStringSubmatchIndex(readme, -1) {
		name := readme[m[2]:m[3]]
		if seen[name] {
			return nil, fmt.Errorf("generated block %q appears twice", name)
		}
		seen[name] = true
		closing := closeMarker(name)
		i := strings.Index(readme[m[1]:], closing)
		if i < 0 {
			return nil, fmt.Errorf("generated block %q has no closing %s", name, closing)
		}
		end := m[1] + i + len(closing)
		if len(spans) > 0 && m[0] < spans[len(spans)-1].end {
			return nil, fmt.Errorf("generated block %q starts inside block %q", name, spans[len(spans)-1].name)
		}
		spans = append(spans, span{name: name, start: m[0], end: end})
	}
	return spans, nil
}

func index(blocks []Block) map[string]Block {
	m := make(map[string]Block, len(blocks))
	for _, b := range blocks {
		m[b.Name] = b
	}
	return m
}

// Update returns readme with every generated block replaced by its rendering.
// A block in the README that Render does not produce, or a rendered block
// the README lacks, is an error naming it.
func Update(readme string, blocks []Block) (string, error) {
	out, found, err := replaceBlocks(readme, index(blocks))
	if err != nil {
		return "", err
	}
	if err := checkAllFound(blocks, found); err != nil {
		return "", err
	}
	return out, nil
}

// replaceBlocks rewrites the blocks text holds from byName and reports
// which it found; a block no renderer produces is an error naming it.
func replaceBlocks(text string, byName map[string]Block) (string, map[string]bool, error) {
	spans, err := findBlocks(text)
	if err != nil {
		return "", nil, err
	}
	var out strings.Builder
	last := 0
	found := map[string]bool{}
	for _, s := range spans {
		b, ok := byName[s.name]
		if !ok {
			return "", nil, fmt.Errorf("generated block %q: no renderer produces it", s.name)
		}
		found[s.name] = true
		out.WriteString(text[last:s.start])
		out.WriteString(openText(b) + b.Body + closeMarker(b.Name))
		last = s.end
	}
	out.WriteString(text[last:])
	return out.String(), found, nil
}

func checkAllFound(blocks []Block, found map[string]bool) error {
	var missing []string
	for _, b := range blocks {
		if !found[b.Name] {
			missing = append(missing, b.Name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("rendered blocks missing their markers: %s", strings.Join(missing, ", "))
	}
	return nil
}

// Diff says how readme's generated blocks differ from blocks: one line per
// differing block, naming it and its first differing line; nil when they
// agree. Blocks readme does not hold are not its concern (DiffFiles checks
// that every block is somewhere).
func Diff(readme string, blocks []Block) ([]string, error) {
	spans, err := findBlocks(readme)
	if err != nil {
		return nil, err
	}
	byName := index(blocks)
	want, _, err := replaceBlocks(readme, byName)
	if err != nil {
		return nil, err
	}
	if want == readme {
		return nil, nil
	}
	var diffs []string
	for _, s := range spans {
		b := byName[s.name]
		got := readme[s.start:s.end]
		exp := openText(b) + b.Body + closeMarker(b.Name)
		if got != exp {
			diffs = append(diffs, fmt.Sprintf("block %q differs from its evidence (%s): %s", s.name, b.Source, firstDiff(got, exp)))
		}
	}
	return diffs, nil
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d of the block is %q, the evidence gives %q", i+1, gl, wl)
		}
	}
	return "same lines"
}
