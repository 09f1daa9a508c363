package docsgen

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The rule for hand-written numbers. Every measured number a reader sees in
// README.md, docs/*.md, docs/**/README.md or methods/*/README.md must sit in
// a generated block (rendered from its evidence by `make docs`). A number
// is MEASURED when it is
//
//   - a decimal number (a digit, a point, a digit: 74.22, 0.5, 1.4–2.9), or
//   - a number followed, with or without a space, by a unit of a measured
//     quantity: % or "points" (accuracies), × or x (ratios), s, ms, µs, min,
//     h, seconds, minutes, hours (times), images/s, GFLOP/s, GFLOP, TFLOP
//     (rates and work), B, KB, KiB, MB, MiB, GB, GiB, bytes (sizes).
//
// Integers without a unit (10 clients, 5 rounds, 16 shots, seed 3) are
// counts of a setting and are not measured numbers.
//
// A measured-looking number is allowed outside a generated block only by
// one of these narrow rules, each about what the number is:
//
//   - code: inside an inline code span (`lr=0.05`, `--rounds 3`) or a
//     fenced block with a language (```sh, ```yaml, ```go): commands,
//     settings and code, not results (an unlabelled fence is output and is
//     scanned); a number one space after a code span is that key's value
//     (`fedot.lr` 0.01);
//   - published: inside a <!-- paper: NAME, WHERE --> … <!-- /paper -->
//     block, WHERE being Table N, Figure N, abstract, README or file PATH
//     (the authors' log, or the spec the number was read from): it quotes
//     a paper's own numbers and names where they come from;
//   - setting: directly after the name of a hyper-parameter, a default or
//     a bound (hyperWords: lr, ε, λ, ratio, tolerance, default, every,
//     chance (a chance level, 1/classes), …;
//     a comparison sign ≥ ≤ < > =, or the words above, below, at most, at
//     least, up to, within, more than, less than), or after "A–", "A / ",
//     "A, " where A is such a setting (a range or list of them), or a
//     fraction followed by "participation" or "held out", or a size
//     followed by "a value"/"per value" (a format's size): a setting or a
//     required bound that a test or the code holds, not a result;
//   - reference: a version (v1.2, Go 1.24, x.y.z), a section, table,
//     figure, equation or issue number (§3.2, Table 4, Eq. 2.1), a date
//     or clock time (2026-11-29, 06:56), a shape (224×224: × followed by a
//     digit), a file name or path (clip.go, ViT-B/16) or a URL;
//   - HTML comments are not shown to the reader and are not scanned.
//
// Markdown under docs/ other than the top-level docs/*.md and each folder's
// README.md is written by pfedmma itself (a run's report.md, a tune's
// tune.md, the mutation tool's table.md, a sitting's table-*.md, the
// paper-scale projection's paperscale.md) and is evidence, not prose; any
// other name is an error (ScanDocs), so a hand-written page cannot hide
// there.

// HandNumber is one measured number written by hand outside a generated
// block: the file, its line (1-based), the number as written and the line.
type HandNumber struct {
	Path   string
	Line   int
	Number string
	Text   string
}

func (h HandNumber) String() string {
	return fmt.Sprintf("%s:%d: %q is a measured number outside a generated block: %s", h.Path, h.Line, h.Number, strings.TrimSpace(h.Text))
}

// evidenceMarkdown are the names of markdown files pfedmma writes as
// evidence beside the JSON they summarise.
var evidenceMarkdown = regexp.MustCompile(`^(report|tune|table|table-[a-z0-9_-]+|paperscale)\.md$`)

// ScanDocs reads the hand-written markdown under root: README.md,
// docs/*.md, docs/**/README.md and methods/*/README.md. A markdown file
// under docs/ of any other name that is not a known evidence output is an
// error naming it.
func ScanDocs(root string) ([]File, error) {
	var paths []string
	for _, pat := range []string{"README.md", "docs/*.md", "methods/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			return nil, fmt.Errorf("docsgen: pattern %s: %w", pat, err)
		}
		paths = append(paths, m...)
	}
	docs := filepath.Join(root, "docs")
	err := filepath.WalkDir(docs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(p, ".md") || filepath.Dir(p) == docs {
			return nil
		}
		switch name := d.Name(); {
		case name == "README.md":
			paths = append(paths, p)
		case !evidenceMarkdown.MatchString(name):
			return fmt.Errorf("docsgen: %s: markdown under docs/ is a top-level page, a folder's README.md or a tool's output (report.md, tune.md, table*.md, paperscale.md)", p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("docsgen: %w", err)
		}
		files = append(files, File{Path: p, Text: string(data)})
	}
	return files, nil
}

var (
	generatedSpan = regexp.MustCompile(`(?s)<!-- generated:([a-z0-9-]+) \(make docs; from [^)]*\) -->.*?<!-- /generated:([a-z0-9-]+) -->`)
	paperSpan     = regexp.MustCompile(`(?s)<!-- paper: [^>]*?, (?:(?:Table|Figure) [0-9A-Za-z.–-]+|abstract|README|file [^ >]+) -->.*?<!-- /paper -->`)
	commentSpan   = regexp.MustCompile(`(?s)<!--.*?-->`)
	labelledFence = regexp.MustCompile("(?ms)^ *```[a-zA-Z0-9_+-]+[^\n]*\n.*?^ *```[^\n]*$")
	codeSpan      = regexp.MustCompile("``[^`\n]+``|`[^`\n]+`")
	urlSpan       = regexp.MustCompile(`\]\([^)\s]*\)|https?://\S+`)
	// a path, file name or dotted identifier: letters or digits joined by
	// . / _ - with a letter somewhere (clip.go, ViT-B/16, 0_5.json)
	pathWord = regexp.MustCompile(`[A-Za-z0-9_]*[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z0-9_-]+)+|[A-Za-z0-9_-]+/[A-Za-z0-9_./-]+|[A-Za-z]+-?[0-9][A-Za-z0-9.]*`)
	dateTime = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b`)
	version  = regexp.MustCompile(`\bv\d+(?:\.\d+)+\b|\b\d+\.\d+\.\d+\b|\b(?:Go|go|Python|PyTorch|torch|CUDA|cuDNN|oneDNN|OpenBLAS|numpy|NumPy|version|release|GCC|gcc|Ubuntu|Debian|Debian's|TLS) ?\d+(?:\.\d+)*\b`)
	citation = regexp.MustCompile(`(?:§|\b(?:Table|Tables|Figure|Fig\.|Eq\.|Equation|Algorithm|Section|section|Sec\.|Appendix|issue|issues|Issue|PR|line|lines|step|Step|sitting|Sitting|round|rounds|Round|epoch|seed|seeds) ?)\(?\d+(?:\.\d+)*\)?`)
	shape    = regexp.MustCompile(`\d+(?:×\d+)+(?:[×x]\d+)*|\d+ × \d+(?: × \d+)*`)
	// a number and what follows it
	numberTok = regexp.MustCompile(`\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?`)
	// a fraction that is a setting: 50% participation, 25% of the names held out
	// or a size of the format (8 bytes a value, 1.0625 bytes per value)
	settingAfter = regexp.MustCompile(`^ (?:participation|held out|of [^.;]{0,60}held out|a value|per value)`)
	rateUnit     = regexp.MustCompile(`^[A-Za-z]+/s$`) // GFLOP/s, images/s: a unit, not a path
	unitAfter    = regexp.MustCompile(`^(?:\s?(?:%|×|x\b|points?\b|pp\b|s\b|ms\b|µs\b|us\b|min\b|h\b|seconds?\b|minutes?\b|hours?\b|[A-Za-z]+/s\b|GFLOP|TFLOP|TFLOPS?|GMAC|B\b|KB\b|KiB\b|kB\b|MB\b|MiB\b|GB\b|GiB\b|bytes?\b))`)
)

// hyperWords name settings and bounds: a number right after one (or after
// a comparison sign) is a setting, not a result.
var hyperWords = []string{
	"lr", "learning rate", "ε", "eps", "epsilon", "δ", "λ", "lambda", "α", "alpha", "β", "beta", "γ", "τ", "temperature",
	"ratio", "weight decay", "momentum", "dropout", "rank", "threshold", "clipping threshold",
	"tolerance", "tol", "atol", "rtol", "σ", "smoothing", "≥", "≤", "<", ">", "=", "μ",
	"Dir", "θ", "chance", "scale", "noise", "dropout_rate", "top_percent", "weight", "e^", "default", "every",
	"above", "below", "at most", "at least", "up to", "within", "more than", "less than",
}

// HandNumbers lists every measured number written by hand in files
// outside generated blocks and generated rows (a line that starts with a
// row's prefix, as RenderRows writes it), by the rule above.
func HandNumbers(files []File, rows []Row) []HandNumber {
	var out []HandNumber
	for _, f := range files {
		masked := maskAllowed(f.Text)
		lines := strings.Split(f.Text, "\n")
		prev := ""
		for i, l := range strings.Split(masked, "\n") {
			if generatedRow(lines[i], rows) {
				prev = ""
				continue
			}
			for _, n := range measuredIn(prev, l) {
				out = append(out, HandNumber{Path: f.Path, Line: i + 1, Number: n, Text: lines[i]})
			}
			prev = strings.TrimSpace(l)
		}
	}
	return out
}

// blank replaces every match of re in s with spaces, keeping newlines and
// byte offsets.
func blank(s string, re *regexp.Regexp) string {
	return re.ReplaceAllStringFunc(s, func(m string) string {
		b := []byte(m)
		for i, c := range b {
			if c != '\n' {
				b[i] = ' '
			}
		}
		return string(b)
	})
}

// maskAllowed blanks the parts of a markdown text whose numbers are not
// measured prose: generated blocks, quoted papers, comments, labelled
// fences, code spans, URLs, paths, dates, versions, citations and shapes.
func maskAllowed(text string) string {
	for _, re := range []*regexp.Regexp{generatedSpan, paperSpan, commentSpan, labelledFence} {
		text = blank(text, re)
	}
	// a code span becomes the word KEY: a number right after it is that
	// key's value (`fedot.lr` 0.01)
	text = codeSpan.ReplaceAllString(text, codeKey)
	for _, re := range []*regexp.Regexp{urlSpan, dateTime, version, citation, shape} {
		text = blank(text, re)
	}
	// a path or name holds a letter: 97.17/77.40 is two numbers, not a path
	return pathWord.ReplaceAllStringFunc(text, func(m string) string {
		if !strings.ContainsAny(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") || rateUnit.MatchString(m) {
			return m
		}
		return strings.Repeat(" ", len(m))
	})
}

// measuredIn returns the measured numbers of one masked line; prev is the
// line before it (a sentence wraps: "above" may end the line before).
func measuredIn(prev, line string) []string {
	var out []string
	prevSetting := false
	for _, m := range numberTok.FindAllStringIndex(line, -1) {
		num, rest := line[m[0]:m[1]], line[m[1]:]
		before := line[:m[0]]
		if strings.TrimSpace(before) == "" {
			before = prev + " "
		}
		setting := afterSetting(before) || (prevSetting && rangeDash(before))
		prevSetting = setting
		if setting {
			continue
		}
		u := unitAfter.FindString(rest)
		if u != "" && settingAfter.MatchString(rest[len(u):]) {
			continue
		}
		if strings.Contains(strings.TrimSpace(num), ".") || u != "" {
			out = append(out, num+u)
		}
	}
	return out
}

// rangeDash: the number continues a range or list begun by the number
// before it (A–B, A-B, A / B, A, B, A or B).
func rangeDash(before string) bool {
	t := strings.TrimRight(before, " ")
	for _, sep := range []string{"–", "-", "/", ",", " or", " and", "to"} {
		if strings.HasSuffix(t, sep) {
			return true
		}
	}
	return false
}

// codeKey stands for a code span in the masked text.
const codeKey = "\x00KEY\x00"

// afterSetting: the text before a number ends with a hyper-parameter's
// name or a bound's sign, or is a code span and one space (a key's value).
func afterSetting(before string) bool {
	if strings.HasSuffix(before, codeKey+" ") {
		return true
	}
	t := strings.TrimRight(before, " (*")
	for _, w := range hyperWords {
		if !strings.HasSuffix(t, w) {
			continue
		}
		head := t[:len(t)-len(w)]
		if head == "" || !isWordByte(head[len(head)-1]) || !isWordByte(w[0]) {
			return true
		}
	}
	return false
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func generatedRow(line string, rows []Row) bool {
	t := strings.TrimLeft(line, " ")
	for _, r := range rows {
		if strings.HasPrefix(t, r.Prefix) {
			return true
		}
	}
	return false
}
