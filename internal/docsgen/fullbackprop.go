package docsgen

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
)

// FullBackpropDir holds world-compare's summaries of the methods that
// backpropagate through whole encoders, in fp32 and in bf16
// (docs/fullbackprop/{fp32,bf16}/summary.json).
const FullBackpropDir = "fullbackprop"

var fullBackpropMethods = []string{"clip_lora", "adapt", "maple", "fedmvp"}

// fullBackpropBlocks renders the fp32 → bf16 table of README's "Full
// backpropagation in bf16" and FedMVP's Local in both.
func fullBackpropBlocks(docsDir string) ([]Block, error) {
	dir := filepath.Join(docsDir, FullBackpropDir)
	fp, err := readSummary(filepath.Join(dir, "fp32", "summary.json"))
	if err != nil {
		return nil, fmt.Errorf("full backpropagation: %w", err)
	}
	bf, err := readSummary(filepath.Join(dir, "bf16", "summary.json"))
	if err != nil {
		return nil, fmt.Errorf("full backpropagation: %w", err)
	}
	var b strings.Builder
	b.WriteString("\n```\n" + strings.Repeat(" ", 13))
	for i, k := range fp.Metrics {
		if i == len(fp.Metrics)-1 {
			b.WriteString(k + "\n")
		} else {
			fmt.Fprintf(&b, "%-15s", k)
		}
	}
	for _, m := range fullBackpropMethods {
		f, okF := fp.Methods[m]
		g, okB := bf.Methods[m]
		if !okF || !okB {
			return nil, fmt.Errorf("full backpropagation: %s lacks method %s in fp32 or bf16", dir, m)
		}
		var cells []string
		for _, k := range fp.Metrics {
			v, ok := g[k]
			if !ok {
				return nil, fmt.Errorf("full backpropagation: %s: bf16 %s lacks %s", dir, m, k)
			}
			cells = append(cells, fmt.Sprintf("%5.2f → %5.2f", f[k], v))
		}
		fmt.Fprintf(&b, "%-13s%s\n", m, strings.Join(cells, "  "))
	}
	b.WriteString("```\n")
	src := "docs/fullbackprop/fp32/summary.json and docs/fullbackprop/bf16/summary.json"
	worst, at := 0.0, ""
	for _, m := range fullBackpropMethods {
		if d := math.Abs(fp.Methods[m]["local"] - bf.Methods[m]["local"]); d > worst {
			worst, at = d, m
		}
	}
	diff := fmt.Sprintf("The largest Local difference in these runs is %.2f points (%s)", worst, at)
	if worst > bf16Guard {
		diff += fmt.Sprintf(", more than the guard's %.1f", bf16Guard)
	} else {
		diff += fmt.Sprintf(", within the guard's %.1f", bf16Guard)
	}
	diff += "."
	fedmvp := fmt.Sprintf("%.2f → %.2f", fp.Methods["fedmvp"]["local"], bf.Methods["fedmvp"]["local"])
	return []Block{
		{Name: "fullbackprop-bf16", Source: src, Body: b.String()},
		{Name: "fedmvp-local-bf16", Source: src, Body: fedmvp},
		{Name: "fullbackprop-local-diff", Source: src, Body: diff},
	}, nil
}

// bf16Guard is TestBF16FullBackprop's bound on Local (experiment's bf16Slack).
const bf16Guard = 1.1
