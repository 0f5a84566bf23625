package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkPolicyShape walks a policy file's YAML tree beside the file types
// and names each mistake by its path in the file (otp.cooldwon), not by
// the Go type yaml.v3 would name: an unknown key, with the nearest known
// one, or a value of the wrong kind (a word where a number goes, a list
// where a section goes). Values a type parses itself (durations) are left
// to their parser, which names its line.
//
// A file that says nothing is not a policy, and is refused rather than
// read as the built-in defaults (an operator who meant a policy and
// truncated the file, or wrote `otp: null`, would otherwise reload "ok"
// with every restriction gone): an empty or comment-only file, a top-level
// section left empty, and a second YAML document (only the first would be
// read).
func checkPolicyShape(b []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return errEmptyPolicy
	} else if err != nil {
		return err
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return errEmptyPolicy
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return fmt.Errorf("line %d: a second YAML document (after ---): a policy file holds one", next.Line)
	}
	root := doc.Content[0]
	var errs []error
	checkNode(root, reflect.TypeFor[filePolicies](), "", &errs)
	if root.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k, v := root.Content[i], root.Content[i+1]; v.Tag == "!!null" {
				errs = append(errs, fmt.Errorf("line %d: %s: empty section (give its settings, or leave the key out to keep the defaults)", k.Line, k.Value))
			}
		}
	}
	return errors.Join(errs...)
}

// errEmptyPolicy refuses a file with nothing in it.
var errEmptyPolicy = errors.New("the file is empty (no settings, only comments or blank lines): not a policy; the built-in defaults are not taken from an empty file")

var yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func checkNode(n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	bad := func(format string, args ...any) {
		*errs = append(*errs, fmt.Errorf("line %d: %s: %s", n.Line, orRoot(path), fmt.Sprintf(format, args...)))
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Tag == "!!null" {
		return // an empty value keeps the default
	}
	if reflect.PointerTo(t).Implements(yamlUnmarshaler) {
		return
	}
	switch t.Kind() {
	case reflect.Pointer: // an optional section or value (a service's otp:)
		checkNode(n, t.Elem(), path, errs)
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad("want a section of keys (%s), got %s", strings.Join(yamlFields(t), ", "), describeNode(n))
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fieldByYAMLName(t, k.Value)
			if !ok {
				msg := "unknown field"
				if near := nearest(k.Value, fields); near != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", near)
				}
				*errs = append(*errs, fmt.Errorf("line %d: %s: %s", k.Line, join(path, k.Value), msg))
				continue
			}
			checkNode(v, f.Type, join(path, k.Value), errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad("want a section of keys, got %s", describeNode(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), errs)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			bad("want a list, got %s", describeNode(n))
			return
		}
		for i, item := range n.Content {
			checkNode(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.Kind != yaml.ScalarNode {
			bad("want a whole number, got %s", describeNode(n))
		} else if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			bad("want a whole number, got %q", n.Value)
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode {
			bad("want a number, got %s", describeNode(n))
		} else if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
			bad("want a number, got %q", n.Value)
		}
	case reflect.Bool:
		var v bool
		if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil {
			bad("want true or false, got %s", describeNode(n))
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			bad("want a single value, got %s", describeNode(n))
		}
	}
}

// yamlFields lists the keys a struct of the file format takes.
func yamlFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		if name := yamlName(f); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func fieldByYAMLName(t reflect.Type, name string) (reflect.StructField, bool) {
	for f := range t.Fields() {
		if yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.SequenceNode:
		return "a list"
	default:
		return strconv.Quote(n.Value)
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string { return or(path, "(the file)") }
