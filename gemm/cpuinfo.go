package gemm

import (
	"bufio"
	"os"
	"runtime"
	"slices"
	"strings"
)

// CPUInfo names the processor a speed figure was measured on: its model and
// the instruction-set extensions that decide which GEMM path is fastest.
type CPUInfo struct {
	Model string   `json:"model"`
	Flags []string `json:"flags"` // of speedFlags, those the CPU has
}

// speedFlags are the /proc/cpuinfo flags that change GEMM speed: AVX-512,
// its bfloat16 dot products, AMX's bfloat16 tiles and AVX-512 FP16.
var speedFlags = []string{"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16"}

// CPU reads the model name and the speed-relevant flags from /proc/cpuinfo
// (GOARCH alone where it cannot be read).
func CPU() CPUInfo {
	info := CPUInfo{Model: runtime.GOARCH}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return info
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var model, flags string
	for sc.Scan() && (model == "" || flags == "") {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "model name":
			model = strings.TrimSpace(val)
		case "flags":
			flags = val
		}
	}
	if model != "" {
		info.Model = model
	}
	have := strings.Fields(flags)
	for _, fl := range speedFlags {
		if slices.Contains(have, fl) {
			info.Flags = append(info.Flags, fl)
		}
	}
	return info
}

// String is "MODEL (flag flag …)".
func (c CPUInfo) String() string {
	if len(c.Flags) == 0 {
		return c.Model
	}
	return c.Model + " (" + strings.Join(c.Flags, " ") + ")"
}
