package main

import "github.com/pfedmma/pfedmma/assets"

// The embedded tiny CLIP (pretrained on the generated world) is the default
// --model of every command.
func init() { defaultModelDir = assets.DefaultModelDir }
