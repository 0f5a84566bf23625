package simulate

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// checkFields walks the YAML document against the shape of v (a pointer
// to a struct) and refuses the first mapping key the shape does not have,
// naming its path ("populations[1].verfy") and line: yaml.v3's
// KnownFields names only the type, which a user writing a scenario by
// hand does not know.
func checkFields(doc *yaml.Node, v any) error {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return fmt.Errorf("the scenario is empty")
		}
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a scenario is a mapping of fields (start, duration, populations, ...)", n.Line)
	}
	return walk(n, reflect.TypeOf(v).Elem(), "")
}

func walk(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct && t.Name() != "Time":
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%s (line %d): want a mapping of fields", orRoot(path), n.Line)
		}
		fields := map[string]reflect.Type{}
		var names []string
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = f.Type
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("%s (line %d): unknown field (known: %s)", join(path, k), n.Content[i].Line, strings.Join(names, ", "))
			}
			if err := walk(n.Content[i+1], ft, join(path, k)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fmt.Errorf("%s (line %d): want a list", path, n.Line)
		}
		for i, e := range n.Content {
			if err := walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("%s (line %d): want a mapping", path, n.Line)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := walk(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	default:
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("%s (line %d): want a single value", path, n.Line)
		}
		if want := scalarError(n.Value, t); want != "" {
			return fmt.Errorf("%s (line %d): %q is not %s", path, n.Line, n.Value, want)
		}
	}
	return nil
}

// scalarError says what value was wanted when s does not parse as t.
func scalarError(s string, t reflect.Type) string {
	var err error
	want := ""
	switch {
	case t == reflect.TypeFor[Duration]():
		_, err = time.ParseDuration(s)
		want = "a duration (e.g. 90m, 24h, 168h)"
	case t == reflect.TypeFor[time.Time]():
		_, err = time.Parse(time.RFC3339, s)
		want = "a time such as 2026-03-02T00:00:00Z"
	case t.Kind() == reflect.Float64:
		_, err = strconv.ParseFloat(s, 64)
		want = "a number"
	case t.Kind() == reflect.Int:
		_, err = strconv.Atoi(s)
		want = "a whole number"
	case t.Kind() == reflect.Uint64:
		_, err = strconv.ParseUint(s, 10, 64)
		want = "a whole number of at least 0"
	case t.Kind() == reflect.Bool:
		if s != "true" && s != "false" {
			err = strconv.ErrSyntax
		}
		want = "true or false"
	}
	if err != nil {
		return want
	}
	return ""
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func orRoot(path string) string {
	if path == "" {
		return "the scenario"
	}
	return path
}
