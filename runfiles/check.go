package runfiles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/pfedmma/pfedmma/config"
	methodspkg "github.com/pfedmma/pfedmma/methods"
	"github.com/pfedmma/pfedmma/protocol"
)

// infoProtocols are the protocol names a run.json may hold.
var infoProtocols = []string{protocol.BaseToNovel, protocol.Dirichlet, protocol.Domains, protocol.Pathological,
	protocol.Natural, protocol.LeaveOneDomainOut, protocol.DomainGeneralization}

// maxInfoSpaces bounds the label spaces a run.json may list (a run has
// a handful: local, base, novel, one per domain).
const maxInfoSpaces = 1000

// decodeInfo parses run.json strictly — unknown fields, trailing data
// and wrongly typed values are errors naming the field — then checks every
// field ([Info.check]).
func decodeInfo(data []byte) (*Info, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var info Info
	if err := dec.Decode(&info); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return nil, fmt.Errorf("field %q: a JSON %s where %s belongs", te.Field, te.Value, jsonKind(te.Type))
		case errors.As(err, &se):
			return nil, fmt.Errorf("not valid JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errors.New("empty or truncated JSON")
		}
		return nil, errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON object")
	}
	if err := info.check(); err != nil {
		return nil, err
	}
	return &info, nil
}

// jsonKind names a Go type as the JSON value it decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another value"
}

// check validates every field of a run.json (after a hand edit, a
// mismatched copy or a damaged disk): the names and paths it must hold,
// class indices in range, client IDs 0..n-1 each with a label space, the
// template's class slot, and each method's site folder inside the run.
func (info *Info) check() error {
	switch {
	case strings.TrimSpace(info.Model) == "":
		return errors.New(`field "model": empty; want the CLIP checkpoint the run used`)
	case !strings.Contains(info.Template, "{}"):
		return fmt.Errorf(`field "template": %q has no {} for the class name (every class would get the same prompt)`, info.Template)
	case strings.TrimSpace(info.Dataset) == "":
		return errors.New(`field "dataset": empty`)
	case !slices.Contains(infoProtocols, info.Protocol):
		return fmt.Errorf(`field "protocol": %q; want one of %s`, info.Protocol, strings.Join(infoProtocols, ", "))
	case len(info.Classes) == 0:
		return errors.New(`field "classes": no classes`)
	case len(info.Classes) > config.MaxNumClasses:
		return fmt.Errorf(`field "classes": %d classes; at most %d`, len(info.Classes), config.MaxNumClasses)
	case len(info.Spaces) == 0:
		return errors.New(`field "spaces": no label spaces`)
	case len(info.Spaces) > maxInfoSpaces:
		return fmt.Errorf(`field "spaces": %d label spaces; at most %d`, len(info.Spaces), maxInfoSpaces)
	case len(info.ClientSpace) == 0:
		return errors.New(`field "client_space": no clients`)
	case len(info.ClientSpace) > config.MaxClients:
		return fmt.Errorf(`field "client_space": %d clients; at most %d`, len(info.ClientSpace), config.MaxClients)
	case len(info.Methods) == 0:
		return errors.New(`field "methods": no methods`)
	case info.ModelSHA256 != "" && !isSHA256Hex(info.ModelSHA256):
		return fmt.Errorf(`field "model_sha256": %q; want 64 hexadecimal digits`, info.ModelSHA256)
	}
	if err := info.checkClassesAndSpaces(); err != nil {
		return err
	}
	for id := range len(info.ClientSpace) {
		sp, ok := info.ClientSpace[id]
		if !ok {
			return fmt.Errorf(`field "client_space": client %d missing (client IDs must run 0..%d)`, id, len(info.ClientSpace)-1)
		}
		if sp < 0 || sp >= len(info.Spaces) {
			return fmt.Errorf(`field "client_space": client %d trained over space %d; the run has spaces 0..%d`, id, sp, len(info.Spaces)-1)
		}
	}
	return info.checkMethods()
}

// checkClassesAndSpaces refuses an empty or repeated class name, and a
// label space with a bad name, no classes, or a class out of range or
// listed twice.
func (info *Info) checkClassesAndSpaces() error {
	seen := make(map[string]bool, len(info.Classes))
	for i, c := range info.Classes {
		if strings.TrimSpace(c) == "" {
			return fmt.Errorf(`field "classes": class %d has an empty name`, i)
		}
		if seen[c] {
			return fmt.Errorf(`field "classes": class %q listed twice`, c)
		}
		seen[c] = true
	}
	spaceNames := map[string]bool{}
	for i, s := range info.Spaces {
		if strings.TrimSpace(s.Name) == "" || s.Name == "all" || spaceNames[s.Name] {
			return fmt.Errorf(`field "spaces": space %d has the name %q (empty, "all" or a repeat)`, i, s.Name)
		}
		spaceNames[s.Name] = true
		if len(s.Classes) == 0 {
			return fmt.Errorf(`field "spaces": space %q has no classes`, s.Name)
		}
		in := make(map[int]bool, len(s.Classes))
		for _, c := range s.Classes {
			if c < 0 || c >= len(info.Classes) {
				return fmt.Errorf(`field "spaces": space %q lists class %d; the run has classes 0..%d`, s.Name, c, len(info.Classes)-1)
			}
			if in[c] {
				return fmt.Errorf(`field "spaces": space %q lists class %d twice`, s.Name, c)
			}
			in[c] = true
		}
	}
	return nil
}

// checkMethods refuses an empty, repeated or unknown method, one without
// its sites folder (a relative path inside the run folder), and a sites or
// sections entry of a method not listed.
func (info *Info) checkMethods() error {
	methods := map[string]bool{}
	for _, m := range info.Methods {
		if strings.TrimSpace(m) == "" || methods[m] {
			return fmt.Errorf(`field "methods": %q is empty or listed twice`, m)
		}
		if _, err := methodspkg.Get(m); err != nil {
			return fmt.Errorf(`field "methods": %w`, err)
		}
		methods[m] = true
		dir, ok := info.Sites[m]
		if !ok {
			return fmt.Errorf(`field "sites": no folder for method %q`, m)
		}
		if !filepath.IsLocal(dir) {
			return fmt.Errorf(`field "sites": method %q: folder %q is not a relative path inside the run folder`, m, dir)
		}
	}
	for _, field := range []struct {
		name string
		m    map[string]string
	}{{"sites", info.Sites}, {"sections", info.Sections}} {
		for m := range field.m {
			if !methods[m] {
				return fmt.Errorf(`field %q: method %q is not in "methods"`, field.name, m)
			}
		}
	}
	return nil
}

// isSHA256Hex says whether s is a SHA-256 in lower-case hexadecimal.
func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
