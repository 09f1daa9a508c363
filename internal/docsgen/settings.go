package docsgen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// modulePath is the module whose package paths map to folders of the
// repository.
const modulePath = "github.com/pfedmma/pfedmma/"

// MethodSettings is one method's config section as its default settings
// value (a pointer to the method's settings struct, as DefaultConfig
// returns it); the caller supplies it from the registry so that this
// package does not link the methods.
type MethodSettings struct {
	Name     string
	Defaults any
}

// SettingsBlocks renders block settings-NAME for every method: a table of
// its config keys in the order the section marshals them, each key's
// default (from Defaults) and what it means (the doc or line comment of
// the struct field with that yaml tag, read from the package's source under
// root). A method without settings gets one sentence saying so.
func SettingsBlocks(root string, ms []MethodSettings) ([]Block, error) {
	var blocks []Block
	for _, m := range ms {
		b, err := settingsBlock(root, m)
		if err != nil {
			return nil, fmt.Errorf("settings of %s: %w", m.Name, err)
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

func settingsBlock(root string, m MethodSettings) (Block, error) {
	name := "settings-" + strings.ReplaceAll(m.Name, "_", "-")
	if m.Defaults == nil || reflect.ValueOf(m.Defaults).IsNil() {
		return Block{Name: name, Source: "the method's DefaultConfig", Body: "`" + m.Name + "` has no settings of its own."}, nil
	}
	t := reflect.TypeOf(m.Defaults)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	rel, ok := strings.CutPrefix(t.PkgPath(), modulePath)
	if !ok || t.Name() == "" {
		return Block{}, fmt.Errorf("settings type %s is not a named type of module %s", t, modulePath)
	}
	docs, err := fieldDocs(filepath.Join(root, filepath.FromSlash(rel)), t.Name())
	if err != nil {
		return Block{}, err
	}
	keys, err := defaultValues(m.Defaults)
	if err != nil {
		return Block{}, err
	}
	var b strings.Builder
	b.WriteString("\n| key | default | meaning |\n|---|---|---|\n")
	for _, kv := range keys {
		if _, ok := docs[kv[0]]; !ok {
			return Block{}, fmt.Errorf("key %s: no field of %s.%s has yaml tag %q", kv[0], rel, t.Name(), kv[0])
		}
		fmt.Fprintf(&b, "| `%s.%s` | %s | %s |\n", m.Name, kv[0], kv[1], docs[kv[0]])
	}
	src := rel + "." + t.Name() + ", its DefaultConfig and field comments"
	return Block{Name: name, Source: src, Body: b.String()}, nil
}

// defaultValues marshals v as its config section does and returns the
// keys (nested ones joined by dots) with their values, in order.
func defaultValues(v any) ([][2]string, error) {
	data, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("settings do not marshal to a mapping")
	}
	var out [][2]string
	flatten("", doc.Content[0], &out)
	return out, nil
}

func flatten(prefix string, n *yaml.Node, out *[][2]string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := prefix+n.Content[i].Value, n.Content[i+1]
		switch {
		case v.Kind == yaml.MappingNode:
			flatten(k+".", v, out)
		case v.Kind == yaml.ScalarNode && v.Value == "":
			*out = append(*out, [2]string{k, "(unset)"})
		case v.Kind == yaml.ScalarNode:
			*out = append(*out, [2]string{k, "`" + v.Value + "`"})
		default:
			b, _ := yaml.Marshal(v)
			*out = append(*out, [2]string{k, "`" + strings.TrimSpace(string(b)) + "`"})
		}
	}
}

// fieldDocs reads the struct typeName in the non-test Go files of dir and
// returns each field's comment (doc comment, or else line comment; a field
// with neither shares the doc comment above it) by its yaml key, on one
// line, with table pipes escaped.
func fieldDocs(dir, typeName string) (map[string]string, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if st := findStruct(f, typeName); st != nil {
			return structDocs(st), nil
		}
	}
	return nil, fmt.Errorf("%s: no struct type %s", dir, typeName)
}

func findStruct(f *ast.File, name string) *ast.StructType {
	var found *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == name {
			found, _ = ts.Type.(*ast.StructType)
		}
		return found == nil
	})
	return found
}

func structDocs(st *ast.StructType) map[string]string {
	docs := map[string]string{}
	prevDoc := "" // a doc comment over several fields ("LR and LocalEpochs, when set, …")
	for _, fl := range st.Fields.List {
		if fl.Tag == nil {
			continue
		}
		tag, err := strconv.Unquote(fl.Tag.Value)
		if err != nil {
			continue
		}
		key, _, _ := strings.Cut(reflect.StructTag(tag).Get("yaml"), ",")
		text := fl.Doc.Text()
		switch {
		case text != "":
			prevDoc = text
		case fl.Comment != nil:
			text, prevDoc = fl.Comment.Text(), ""
		default:
			text = prevDoc
		}
		docs[key] = strings.ReplaceAll(strings.Join(strings.Fields(text), " "), "|", `\|`)
	}
	return docs
}
