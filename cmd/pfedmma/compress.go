package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/pfedmma/pfedmma/compress"
)

// compressFlag is serve's --compress: a shorthand for --set
// federation.compress=… (which `run` and the sites read too).
type compressFlag struct{ codec string }

func (c *compressFlag) add(fl *pflag.FlagSet) {
	fl.StringVar(&c.codec, "compress", "none", "encode the tensors sent both ways: none, fp16 (half precision) or int8 (blockwise, a float32 scale per 64 values) (--set federation.compress=…; sites need the same setting)")
}

// sets is the --set override the flag stands for (none when unset).
func (c *compressFlag) sets(fl *pflag.FlagSet) ([]string, error) {
	if !fl.Changed("compress") {
		return nil, nil
	}
	if _, err := compress.Parse(c.codec); err != nil {
		return nil, fmt.Errorf("--compress %q: want none, fp16 or int8", c.codec)
	}
	return []string{"federation.compress=" + c.codec}, nil
}
