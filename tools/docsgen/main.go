// Command docsgen rewrites the README's generated blocks (the tables and
// summary sentences of measured numbers) from the JSON evidence under docs/;
// `make docs` runs it. With -check it only reports the blocks that differ
// and exits 1 when any does.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/pfedmma/pfedmma/internal/atomicfile"
	"github.com/pfedmma/pfedmma/internal/docsgen"
)

func main() {
	readme := flag.String("readme", "README.md", "the README whose generated blocks to rewrite")
	docs := flag.String("docs", "docs", "the folder of evidence")
	check := flag.Bool("check", false, "only report blocks that differ from the evidence")
	flag.Parse()
	if err := run(*readme, *docs, *check); err != nil {
		slog.Error("docsgen", "err", err)
		os.Exit(1)
	}
}

func run(readmePath, docsDir string, check bool) error {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	blocks, err := docsgen.Render(docsDir)
	if err != nil {
		return err
	}
	rows, err := docsgen.RenderRows(docsDir)
	if err != nil {
		return err
	}
	if check {
		diffs, err := docsgen.Diff(string(data), blocks)
		if err != nil {
			return fmt.Errorf("%s: %w", readmePath, err)
		}
		rowDiffs, err := docsgen.DiffRows(string(data), rows)
		if err != nil {
			return fmt.Errorf("%s: %w", readmePath, err)
		}
		diffs = append(diffs, rowDiffs...)
		for _, d := range diffs {
			fmt.Println(d)
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%s: %d generated blocks differ from their evidence; run make docs", readmePath, len(diffs))
		}
		return nil
	}
	out, err := docsgen.Update(string(data), blocks)
	if err != nil {
		return fmt.Errorf("%s: %w", readmePath, err)
	}
	if out, err = docsgen.UpdateRows(out, rows); err != nil {
		return fmt.Errorf("%s: %w", readmePath, err)
	}
	if out == string(data) {
		return nil
	}
	if err := atomicfile.WriteBytes(readmePath, []byte(out)); err != nil {
		return fmt.Errorf("%s: %w", readmePath, err)
	}
	slog.Info("docsgen: rewrote generated blocks", "readme", readmePath)
	return nil
}
