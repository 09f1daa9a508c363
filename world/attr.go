package world

import (
	"fmt"
	"image/color"
)

// Colour is an index into Colours.
type Colour int

// Shape is an index into Shapes.
type Shape int

// Pattern is an index into Patterns.
type Pattern int

// Domain is a rendering style; an index into Domains.
type Domain int

// The rendering styles. Each keeps colour, shape and pattern recognisable
// while changing low-level image statistics a lot.
const (
	// Photo renders a gradient backdrop, directional lighting, a soft drop
	// shadow and sensor-like noise.
	Photo Domain = iota
	// Clipart renders flat colours with a bold black outline.
	Clipart
	// Sketch renders coloured strokes on paper: an outline, and the pattern
	// drawn as lines or dots.
	Sketch
	// Painting renders a brushy canvas texture with colour jitter and ragged
	// edges.
	Painting
)

// NumDomains is the number of rendering styles.
const NumDomains = 4

// Domains names the rendering styles in Domain order.
var Domains = [NumDomains]string{"photo", "clipart", "sketch", "painting"}

// String returns the domain's name, e.g. "photo".
func (d Domain) String() string {
	if d < 0 || int(d) >= NumDomains {
		return fmt.Sprintf("Domain(%d)", int(d))
	}
	return Domains[d]
}

// The sizes of the attribute vocabularies.
const (
	NumColours  = 8
	NumShapes   = 8
	NumPatterns = 4
)

// Colours names the object colours in Colour order.
var Colours = [NumColours]string{"red", "orange", "yellow", "green", "blue", "purple", "pink", "brown"}

// Shapes names the object shapes in Shape order.
var Shapes = [NumShapes]string{"circle", "square", "triangle", "star", "hexagon", "diamond", "heart", "cross"}

// Patterns names the surface patterns in Pattern order. Solid objects have
// no pattern; class names spell them "solid red circle".
var Patterns = [NumPatterns]string{"solid", "striped", "dotted", "checkered"}

// The patterns, as Pattern values.
const (
	Solid Pattern = iota
	Striped
	Dotted
	Checkered
)

// palette holds the canonical sRGB of each colour (8-bit).
var palette = [NumColours][3]uint8{
	{215, 38, 38},   // red
	{245, 130, 20},  // orange
	{245, 215, 30},  // yellow
	{40, 160, 60},   // green
	{35, 85, 215},   // blue
	{130, 50, 180},  // purple
	{245, 120, 185}, // pink
	{125, 75, 35},   // brown
}

// RGB returns the canonical colour of c.
func (c Colour) RGB() color.RGBA {
	p := palette[c]
	return color.RGBA{p[0], p[1], p[2], 255}
}

// String returns the colour's name.
func (c Colour) String() string {
	if c < 0 || int(c) >= len(Colours) {
		return fmt.Sprintf("Colour(%d)", int(c))
	}
	return Colours[c]
}

// String returns the shape's name.
func (s Shape) String() string {
	if s < 0 || int(s) >= len(Shapes) {
		return fmt.Sprintf("Shape(%d)", int(s))
	}
	return Shapes[s]
}

// String returns the pattern's name.
func (p Pattern) String() string {
	if p < 0 || int(p) >= len(Patterns) {
		return fmt.Sprintf("Pattern(%d)", int(p))
	}
	return Patterns[p]
}

// Composition is one class of the world: a colour, a pattern and a shape.
type Composition struct {
	Colour  Colour
	Pattern Pattern
	Shape   Shape
}

// NumCompositions is the size of the class space, NumColours ×
// NumPatterns × NumShapes.
const NumCompositions = NumColours * NumPatterns * NumShapes

// CompositionAt returns the composition with index id; ids enumerate
// colour-major, then pattern, then shape. It reports false for an id out of
// range.
func CompositionAt(id int) (Composition, bool) {
	if id < 0 || id >= NumCompositions {
		return Composition{}, false
	}
	ns, np := len(Shapes), len(Patterns)
	return Composition{
		Colour:  Colour(id / (np * ns)),
		Pattern: Pattern(id / ns % np),
		Shape:   Shape(id % ns),
	}, true
}

// ID returns the composition's index, the inverse of CompositionAt.
func (c Composition) ID() int {
	return (int(c.Colour)*len(Patterns)+int(c.Pattern))*len(Shapes) + int(c.Shape)
}

// Name returns the class name: colour, pattern, shape ("red striped
// triangle"), except that solid objects read "solid red triangle".
func (c Composition) Name() string {
	if c.Pattern == Solid {
		return "solid " + c.Colour.String() + " " + c.Shape.String()
	}
	return c.Colour.String() + " " + c.Pattern.String() + " " + c.Shape.String()
}

// String returns c.Name().
func (c Composition) String() string { return c.Name() }

// valid reports whether every attribute is in range.
func (c Composition) valid() bool {
	return c.Colour >= 0 && int(c.Colour) < len(Colours) &&
		c.Pattern >= 0 && int(c.Pattern) < len(Patterns) &&
		c.Shape >= 0 && int(c.Shape) < len(Shapes)
}
