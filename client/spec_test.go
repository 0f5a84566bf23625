package client_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/otpguard/otpguard/api/spectest"

	"github.com/otpguard/otpguard/api"
	"github.com/otpguard/otpguard/client"
)

// TestOpsTypesMatchSpec: the ops answers the client decodes name exactly
// the members of their api/openapi.yaml schemas, nested objects included:
// none the spec lacks, none the client drops.
func TestOpsTypesMatchSpec(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		schema string
		v      any
	}{
		{"Override", client.Override{}},
		{"AbuseView", client.AbuseView{}},
		{"DenyEntry", client.DenyEntry{}},
		{"BlockedNumber", client.Block{}},
		{"BlockedList", client.Blocks{}},
		{"Event", client.Event{}},
		{"StoreStatus", client.Status{}},
		{"NumberAnswer", client.NumberAnswer{}},
	} {
		s := doc.Components.Schemas[tc.schema]
		if s == nil {
			t.Fatalf("no schema %s", tc.schema)
		}
		for _, d := range mismatches(reflect.TypeOf(tc.v), s.Value, tc.schema) {
			t.Error(d)
		}
	}
}

var timeType = reflect.TypeFor[time.Time]()

// mismatches compares a Go type with a schema, member by member.
func mismatches(typ reflect.Type, s *openapi3.Schema, at string) []string {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch {
	case typ.Kind() == reflect.Slice:
		if items := spectest.Items(s); items != nil {
			return mismatches(typ.Elem(), items.Value, at+"[]")
		}
		return []string{at + ": a list in Go, not in the spec"}
	case typ.Kind() != reflect.Struct || typ == timeType:
		return nil
	}
	props := spectest.Properties(s)
	fields := map[string]reflect.Type{}
	goFields(typ, fields)
	var out []string
	for name, ft := range fields {
		p, ok := props[name]
		if !ok {
			out = append(out, at+"."+name+": in the client, not in the spec")
			continue
		}
		out = append(out, mismatches(ft, p.Value, at+"."+name)...)
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			out = append(out, at+"."+name+": in the spec, not in the client")
		}
	}
	slices.Sort(out)
	return out
}

// goFields gathers the JSON members of a struct, its embedded structs'
// included, as encoding/json sees them.
func goFields(typ reflect.Type, into map[string]reflect.Type) {
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "":
			goFields(f.Type, into)
		case name != "":
			into[name] = f.Type
		default:
			into[f.Name] = f.Type
		}
	}
}
