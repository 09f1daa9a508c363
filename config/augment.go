package config

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// AugmentMode is how training images are augmented.
type AugmentMode string

// Augmentation modes.
const (
	// AugmentNone trains on the evaluation view of each image (resize the
	// shorter side, center crop); the frozen prefix is computed once per
	// image. The reference code does this for CIFAR.
	AugmentNone AugmentMode = "none"
	// AugmentViews precomputes K random views per training image (random
	// resized crop, scale 0.08–1, bicubic, horizontal flip p 0.5) once and
	// caches their prefixes; each epoch draws one of the K views per image.
	// A cheap approximation of online augmentation.
	AugmentViews AugmentMode = "views"
	// AugmentOnline draws a fresh random view of every image at every step,
	// as the reference code does for the CLIP datasets; no prefix caching of
	// training images, so it is the slowest mode.
	AugmentOnline AugmentMode = "online"
)

// Augment is the training augmentation. In YAML it is one string: "none",
// "views:K" (K ≥ 1) or "online".
type Augment struct {
	Mode  AugmentMode
	Views int // K for AugmentViews, else 0
}

// maxViews bounds K so a typo cannot ask for an absurd cache.
const maxViews = 1024

// ParseAugment parses "none", "views:K" (1 ≤ K ≤ 1024) or "online".
func ParseAugment(s string) (Augment, error) {
	t := strings.TrimSpace(s)
	switch t {
	case string(AugmentNone):
		return Augment{Mode: AugmentNone}, nil
	case string(AugmentOnline):
		return Augment{Mode: AugmentOnline}, nil
	}
	if k, ok := strings.CutPrefix(t, string(AugmentViews)+":"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || n < 1 || n > maxViews {
			return Augment{}, fmt.Errorf("augment %q: K in views:K must be an integer in [1, %d]", s, maxViews)
		}
		return Augment{Mode: AugmentViews, Views: n}, nil
	}
	return Augment{}, fmt.Errorf("augment %q: want none, views:K or online", s)
}

// String returns the YAML form, e.g. "views:4".
func (a Augment) String() string {
	if a.Mode == AugmentViews {
		return fmt.Sprintf("%s:%d", a.Mode, a.Views)
	}
	return string(a.Mode)
}

// validate reports an Augment that ParseAugment would not have produced.
func (a Augment) validate() error {
	b, err := ParseAugment(a.String())
	if err != nil {
		return err
	}
	if b != a {
		return fmt.Errorf("augment %q: views count %d given with mode %q", a.String(), a.Views, a.Mode)
	}
	return nil
}

// MarshalYAML writes the augmentation as its string form.
func (a Augment) MarshalYAML() (any, error) { return a.String(), nil }

// UnmarshalYAML reads the string form.
func (a *Augment) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return fmt.Errorf("want a string: none, views:K or online")
	}
	v, err := ParseAugment(n.Value)
	if err != nil {
		return err
	}
	*a = v
	return nil
}
