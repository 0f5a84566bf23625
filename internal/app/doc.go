// Package app is otpguard's composition root. It owns the configuration
// (one table of settings, settings.go, from which start-up, `config check`,
// the unknown-setting warning and docs/reference.md all come; the policy
// file's YAML format), builds the service from it in named steps (New, in
// build.go: Redis, scripts, the fallback, the ops desk, the sender, the
// guard, the HTTP server), runs it, reloads its policies on SIGHUP and shuts
// it down. It is the one package that knows every other; cmd/otpguard only
// hands it the environment, and every end-to-end test builds through it.
package app
