// Package spectest walks api/openapi.yaml's schemas for the tests that
// hold Go types and real answers to the spec (internal/httpapi's contract
// tests, the client's types). Only tests import it.
package spectest

import "github.com/getkin/kin-openapi/openapi3"

// Properties gathers the properties of s and of its allOf parts; the first
// schema to name a property wins (later parts only narrow it).
func Properties(s *openapi3.Schema) map[string]*openapi3.SchemaRef {
	into := map[string]*openapi3.SchemaRef{}
	collect(s, into)
	return into
}

func collect(s *openapi3.Schema, into map[string]*openapi3.SchemaRef) {
	for name, p := range s.Properties {
		if _, ok := into[name]; !ok && p != nil && p.Value != nil {
			into[name] = p
		}
	}
	for _, part := range s.AllOf {
		if part.Value != nil {
			collect(part.Value, into)
		}
	}
}

// Items is the schema of a list's items, from s or from its allOf parts;
// nil when s is no list.
func Items(s *openapi3.Schema) *openapi3.SchemaRef {
	if s.Items != nil {
		return s.Items
	}
	for _, part := range s.AllOf {
		if part.Value != nil {
			if items := Items(part.Value); items != nil {
				return items
			}
		}
	}
	return nil
}
