// Package plainerr rewrites the messages of Go's parsers that a user of the
// command line sees (strconv's "parsing ...: invalid syntax", encoding/json's
// "cannot unmarshal ... into Go struct field") into plain words.
package plainerr

import (
	"regexp"
	"strings"
)

// Go's decoders word their errors for Go programmers: "strconv.ParseFloat:
// parsing "x": invalid syntax", "json: cannot unmarshal string into Go
// struct field RoundRecord.round of type int". Message rewrites those
// phrases of a command's error for the person who wrote the file; the
// file, line and key the wrapping names stay.
var (
	reStrconv    = regexp.MustCompile(`strconv\.(?:Parse)?(Float|Int|Uint|Bool|Atoi): parsing ("(?:[^"\\]|\\.)*"): (invalid syntax|value out of range)`)
	reJSONField  = regexp.MustCompile(`(?:json: )?cannot unmarshal (\w+) into Go struct field \w*\.([\w.]+) of type ([\w.\[\]*]+)`)
	reJSONValue  = regexp.MustCompile(`(?:json: )?cannot unmarshal (\w+) into Go value of type ([\w.\[\]*]+)`)
	reJSONString = regexp.MustCompile(`(?:json: )?unsupported value: (NaN|[+-]Inf)`)
)

func Message(msg string) string {
	msg = reStrconv.ReplaceAllStringFunc(msg, func(m string) string {
		g := reStrconv.FindStringSubmatch(m)
		what := "a number"
		switch g[1] {
		case "Int", "Uint", "Atoi":
			what = "a whole number"
		case "Bool":
			what = "true or false"
		}
		if g[3] == "value out of range" {
			return g[2] + " is out of range for " + what
		}
		return g[2] + " is not " + what
	})
	msg = reJSONField.ReplaceAllStringFunc(msg, func(m string) string {
		g := reJSONField.FindStringSubmatch(m)
		return `field "` + g[2] + `": a JSON ` + g[1] + " where " + jsonKind(g[3]) + " is expected"
	})
	msg = reJSONValue.ReplaceAllStringFunc(msg, func(m string) string {
		g := reJSONValue.FindStringSubmatch(m)
		return "a JSON " + g[1] + " where " + jsonKind(g[2]) + " is expected"
	})
	return reJSONString.ReplaceAllString(msg, "a value that is not a finite number ($1)")
}

// jsonKind names the JSON a Go type decodes from.
func jsonKind(goType string) string {
	t := strings.TrimLeft(goType, "*")
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "a whole number"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return "an object"
}
