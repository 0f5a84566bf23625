// Package migrations holds otpguard's SQL schema as goose migrations, one
// directory per engine: postgres/ and sqlite/. The two directories carry the
// same version numbers, because one portable file cannot create an
// auto-incrementing key on both engines.
package migrations

import "embed"

// FS holds postgres/*.sql and sqlite/*.sql. It is compiled into the binary
// so that a deployed otpguard can migrate its own database without files
// lying next to it.
//
//go:embed postgres/*.sql sqlite/*.sql
var FS embed.FS
