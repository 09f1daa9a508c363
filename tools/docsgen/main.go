// Command docsgen rewrites the generated blocks (the tables and summary
// sentences of measured numbers) of every markdown file that holds them —
// README.md, docs/*.md, docs/**/README.md and methods/*/README.md — from the
// JSON evidence under docs/ (and each figure, a number of the prose, from
// the evidence its marker names), and each method's settings table from its DefaultConfig and
// the comments of its settings struct; `make docs` runs it. With -check it only reports the blocks
// that differ and exits 1 when any does.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/docsgen"
	"github.com/pfedmma/pfedmma/methods"
	_ "github.com/pfedmma/pfedmma/methods/all" // every method's settings table
)

func main() {
	root := flag.String("root", ".", "the repository root, whose README.md, docs/*.md and methods/*/README.md hold the generated blocks")
	docs := flag.String("docs", "docs", "the folder of evidence")
	check := flag.Bool("check", false, "only report blocks that differ from the evidence")
	flag.Parse()
	if err := run(*root, *docs, *check); err != nil {
		slog.Error("docsgen", "err", err)
		os.Exit(1)
	}
}

func run(root, docsDir string, check bool) error {
	files, err := docsgen.Files(root)
	if err != nil {
		return err
	}
	blocks, err := docsgen.Render(docsDir)
	if err != nil {
		return err
	}
	settings, err := docsgen.SettingsBlocks(root, MethodSettings())
	if err != nil {
		return err
	}
	blocks = append(blocks, settings...)
	figs, err := docsgen.FigureBlocks(root, files)
	if err != nil {
		return err
	}
	blocks = append(blocks, figs...)
	rows, err := docsgen.RenderRows(docsDir)
	if err != nil {
		return err
	}
	if check {
		diffs, err := docsgen.DiffFiles(files, blocks, rows)
		if err != nil {
			return err
		}
		for _, d := range diffs {
			fmt.Println(d)
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%d generated blocks differ from their evidence; run make docs", len(diffs))
		}
		return nil
	}
	out, err := docsgen.UpdateFiles(files, blocks, rows)
	if err != nil {
		return err
	}
	for i, f := range out {
		if f.Text == files[i].Text {
			continue
		}
		if err := atomicfile.WriteBytes(f.Path, []byte(f.Text)); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		slog.Info("docsgen: rewrote generated blocks", "file", f.Path)
	}
	return nil
}

// MethodSettings lists every registered method with its default settings.
func MethodSettings() []docsgen.MethodSettings {
	var ms []docsgen.MethodSettings
	for _, m := range methods.All() {
		ms = append(ms, docsgen.MethodSettings{Name: m.Info().Name, Defaults: m.DefaultConfig()})
	}
	return ms
}
