// Package app is otpguard's composition root. It builds the service from a
// config.Config in named steps (New, in build.go: Redis, scripts, the
// fallback, the ops desk, the sender, the guard, the HTTP server), runs it
// (run.go; its HTTP servers in httpserver.go), reloads its policies on
// SIGHUP and shuts it down; it also runs the subcommands serve, version and
// migrate (command.go). It is the one package that knows every other;
// cmd/otpguard only hands it the command line and the environment, and
// every end-to-end test builds through it.
package app
