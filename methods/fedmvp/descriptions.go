package fedmvp

import (
	"slices"
	"strings"
)

// The description table. The authors' code reads LLM-written attribute
// lists per class (attributes/<dataset>.json, about ten per class) and
// builds each description as "<prefix> <class>, <suffix><sentence>"
// (model/descriptors.py: prefix "a photo of a", sentence from
// make_descriptor_sentence). pfedmma has no LLM and no per-dataset lists,
// so the descriptors are generated deterministically:
//
//   - a class name of the synthetic world ("red striped triangle", "solid
//     blue circle") gets four descriptors from its attributes: its colour,
//     its outline shape, its surface pattern, and its appearance as one flat
//     object;
//   - any other class name gets four generic descriptors (its typical
//     shape, colour, texture and surroundings).
//
// The prefix is the run's prompt template up to its final period with the
// class filled in ("a photo of a {}." → "a photo of a red striped
// triangle"); the sentences follow the authors' make_descriptor_sentence
// rules. Every class gets the same number of descriptions, as the authors'
// torch.stack requires.

// worldColours, worldShapes and worldPatterns are the synthetic world's
// attribute words (world.Colours, world.Shapes, world.Patterns).
var (
	worldColours  = []string{"red", "orange", "yellow", "green", "blue", "purple", "pink", "brown"}
	worldShapes   = []string{"circle", "square", "triangle", "star", "hexagon", "diamond", "heart", "cross"}
	worldPatterns = []string{"solid", "striped", "dotted", "checkered"}
)

// worldAttributes parses a world class name into colour, pattern and shape.
func worldAttributes(class string) (colour, pattern, shape string, ok bool) {
	w := strings.Fields(strings.ReplaceAll(class, "_", " "))
	if len(w) != 3 {
		return "", "", "", false
	}
	if w[0] == "solid" {
		colour, pattern, shape = w[1], w[0], w[2]
	} else {
		colour, pattern, shape = w[0], w[1], w[2]
	}
	if !slices.Contains(worldColours, colour) || !slices.Contains(worldPatterns, pattern) || !slices.Contains(worldShapes, shape) {
		return "", "", "", false
	}
	return colour, pattern, shape, true
}

// Descriptors returns a class's attribute descriptors (the authors' JSON
// lists' entries).
func Descriptors(class string) []string {
	colour, pattern, shape, ok := worldAttributes(class)
	if !ok {
		return []string{"its typical shape and outline", "its typical colours", "its typical surface texture", "its typical surroundings"}
	}
	surface := "a plain surface without any markings"
	switch pattern {
	case "striped":
		surface = "parallel stripes across its surface"
	case "dotted":
		surface = "round dots spread over its surface"
	case "checkered":
		surface = "a checkerboard of squares on its surface"
	}
	return []string{colour + " as its main colour", "the outline of a " + shape, surface, "a single flat object standing out from the background"}
}

// descriptorSentence is the authors' make_descriptor_sentence.
func descriptorSentence(d string) string {
	switch {
	case strings.HasPrefix(d, "a") || strings.HasPrefix(d, "an"):
		return "which is " + d
	case strings.HasPrefix(d, "has"), strings.HasPrefix(d, "often"), strings.HasPrefix(d, "typically"),
		strings.HasPrefix(d, "may"), strings.HasPrefix(d, "can"):
		return "which " + d
	case strings.HasPrefix(d, "used"):
		return "which is " + d
	}
	return "which has " + d
}

// Descriptions returns a class's descriptions under a prompt template
// ("a photo of a {}."): "<template with the class, without its final
// period>, <descriptor sentence>" for each descriptor.
func Descriptions(class, template string) []string {
	name := strings.ReplaceAll(class, "_", " ")
	if !strings.Contains(template, "{}") {
		template = "a photo of a {}."
	}
	head := strings.TrimSuffix(strings.TrimSpace(strings.ReplaceAll(template, "{}", name)), ".")
	var out []string
	for _, d := range Descriptors(class) {
		out = append(out, head+", "+descriptorSentence(d))
	}
	return out
}

// DescriptionChars is the authors' cut of a description before
// tokenising: model/FedMVP.py's compute_description_encodings calls
// truncate_text(d, 77), text[:77].
const DescriptionChars = 77

// Truncate is the authors' truncate_text(d, 77): the first 77 characters
// (Unicode code points, as Python's slice) of a description.
func Truncate(d string) string {
	n := 0
	for i := range d {
		if n == DescriptionChars {
			return d[:i]
		}
		n++
	}
	return d
}
