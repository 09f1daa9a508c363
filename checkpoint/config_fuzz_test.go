package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzFolder makes a model folder whose weights are a link to a clip-tiny
// fixture: model.safetensors (Hugging Face names) or
// open_clip_model.safetensors (OpenAI names).
func fuzzFolder(f *testing.F, openCLIP bool) string {
	dir := f.TempDir()
	src, name := filepath.Join(hfFixture, "model.safetensors"), "model.safetensors"
	if openCLIP {
		src, name = openaiFixture, "open_clip_model.safetensors"
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(dir, name)); err != nil {
		f.Fatal(err)
	}
	return dir
}

// FuzzModelConfig feeds config.json (with the Hugging Face fixture) or
// open_clip_config.json (with the OpenAI-named fixture) to Inspect: no
// panic, errors name the folder or the config, and an accepted config gives
// clip-tiny's shapes with head counts that divide the widths.
func FuzzModelConfig(f *testing.F) {
	hfConf, err := os.ReadFile(filepath.Join(hfFixture, "config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hfConf, false)
	f.Add([]byte(`{"vision_config": {"num_attention_heads": 4, "hidden_act": "gelu"}, "text_config": {"num_attention_heads": 0}}`), false)
	f.Add([]byte(`{"projection_dim": 65}`), false)
	f.Add([]byte(`{"model_cfg": {"embed_dim": 64, "quick_gelu": true, "vision_cfg": {"image_size": 32, "layers": 4, "width": 128, "patch_size": 8, "head_width": 64}, "text_cfg": {"context_length": 77, "vocab_size": 1000, "width": 128, "heads": 2, "layers": 4}}}`), true)
	f.Add([]byte(`{"model_cfg": {"vision_cfg": {"head_width": 0}, "text_cfg": {"heads": -1}}}`), true)
	f.Add([]byte(`[`), true)
	dirs := map[bool]string{false: fuzzFolder(f, false), true: fuzzFolder(f, true)}
	f.Fuzz(func(t *testing.T, conf []byte, openCLIP bool) {
		dir := dirs[openCLIP]
		name := "config.json"
		if openCLIP {
			name = "open_clip_config.json"
		}
		if err := os.WriteFile(filepath.Join(dir, name), conf, 0o644); err != nil {
			t.Fatal(err)
		}
		info, err := Inspect(dir)
		if err != nil {
			if !strings.Contains(err.Error(), dir) {
				t.Fatalf("error %q names neither the folder nor the config", err)
			}
			return
		}
		c := info.Config
		if err := checkConfig(c); err != nil {
			t.Fatalf("accepted config %s: %v", describe(c), err)
		}
		c.Vision.Heads, c.Text.Heads = tinyConfig.Vision.Heads, tinyConfig.Text.Heads
		if c != tinyConfig {
			t.Fatalf("accepted config %s, shapes give %s", describe(info.Config), describe(tinyConfig))
		}
	})
}

// FuzzShardIndex: parseIndex never panics, and what it accepts is a
// sorted, duplicate-free list of plain file names.
func FuzzShardIndex(f *testing.F) {
	f.Add([]byte(`{"metadata": {"total_size": 100}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"a": "../etc/passwd"}}`))
	f.Add([]byte(`{"weight_map": {}}`))
	f.Add([]byte(`{"weight_map": {"a": ""}}`))
	f.Add([]byte(`{"weight_map": {"a": ".."}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		files, err := parseIndex(b)
		if err != nil {
			return
		}
		if len(files) == 0 || !slices.IsSorted(files) || len(slices.Compact(slices.Clone(files))) != len(files) {
			t.Fatalf("shards %q: want a sorted, non-empty set", files)
		}
		for _, s := range files {
			if s == "" || s == "." || s == ".." || strings.ContainsAny(s, `/\`) || filepath.Base(s) != s {
				t.Fatalf("accepted shard name %q", s)
			}
		}
	})
}
