package main

import "github.com/pfedmma/pfedmma/assets"

// defaultModelDir returns the folder of the embedded tiny CLIP (pretrained
// on the generated world), the default --model of every command.
var defaultModelDir = assets.DefaultModelDir

// resolveModelPath returns path, or the embedded default model when empty.
func resolveModelPath(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	return defaultModelDir()
}
