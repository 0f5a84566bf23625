// Package api embeds otpguard's HTTP contract, api/openapi.yaml, so the
// binary can serve it and tests can hold responses to it.
package api

import _ "embed"

// OpenAPI is the text of openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
