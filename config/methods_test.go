package config

// The config tests run without the methods packages: they register
// stand-ins with the same names and the shape of pfedmma's section.
func init() {
	RegisterMethod("zeroshot", nil)
	RegisterMethod("pfedmma", func() Section {
		return &testMMA{Start: 10, Dim: 32, Scale: 0.005, Activation: "relu", CacheBlockOutput: true}
	})
	for _, m := range []string{"promptfl", "fedpgp", "fedotp", "pfedmoap", "clip_adapter", "clip_lora", "fedot", "adapt", "promptfolio", "fedpha", "fedclip", "fedtpg", "maple", "cocoop", "kgcoop", "dpfpl", "fedmvp", "prograd", "plot", "promptsrc"} {
		RegisterMethod(m, nil)
	}
}

type testMMA struct {
	Start      int     `yaml:"start"`
	End        int     `yaml:"end"`
	Dim        int     `yaml:"dim"`
	Scale      float64 `yaml:"scale"`
	Activation string  `yaml:"activation"`
	// CacheBlockOutput stands in for pfedmma.cache_block_output.
	CacheBlockOutput bool `yaml:"cache_block_output"`
}

func (m *testMMA) Check(c *Checker) {
	c.AtLeast("end", m.End, 0)
	if m.End != 0 && m.Start > m.End {
		c.Fail("start", "block %d is after end block %d", m.Start, m.End)
	}
	c.AtLeast("dim", m.Dim, 1)
	c.Positive("scale", m.Scale)
	c.OneOf("activation", m.Activation, "relu", "gelu")
}

func mmaOf(e *Experiment) *testMMA { return e.Sections["pfedmma"].(*testMMA) }
