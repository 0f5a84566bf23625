// Command otpguard guards SMS/OTP sending and shared rate limits for many
// stateless app servers, keeping every limit in one shared Redis.
//
//	otpguard [serve]      serve the API (the default)
//	otpguard version      print the version
//	otpguard config check validate the configuration and print the policies
//	otpguard migrate up|status apply or list the SQL migrations
//	otpguard simulate SCENARIO.yaml run a scenario against the real service on a virtual clock
//
// This package only reads the command line; internal/app builds and runs
// the service.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/otpguard/otpguard/internal/app"
)

// environ lists the environment, for the warning about OTPGUARD_ variables
// otpguard does not know (a test replaces it).
var environ = os.Environ

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tuneGC(os.Getenv) // the process's collector: here, not in run, which tests call
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "otpguard:", err)
		os.Exit(1)
	}
}

// run is the whole program, with its outside world passed in, so that a
// test can boot it on port 0 and stop it by cancelling ctx.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 1 {
		cmd = args[1]
	}
	switch cmd {
	case "serve":
		return serve(ctx, getenv, stdout)
	case "version":
		fmt.Fprintln(stdout, "otpguard", app.Build())
		return nil
	case "migrate":
		if len(args) != 3 || (args[2] != "up" && args[2] != "status") {
			return errors.New("usage: otpguard migrate up|status")
		}
		cfg, err := app.LoadConfig(getenv)
		if err != nil {
			return err
		}
		return app.Migrate(ctx, cfg, args[2] == "up", stdout)
	case "config":
		if len(args) < 3 || args[2] != "check" {
			return fmt.Errorf("usage: otpguard config check")
		}
		cfg, err := loadConfig(getenv)
		if err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		cfg.Warnings = append(cfg.Warnings, app.RedisWarnings(ctx, cfg)...)
		return cfg.Describe(stdout)
	case "simulate":
		return simulateCmd(ctx, args[2:], stdout, os.Stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

const usage = `usage:
  otpguard [serve]        serve the API (configuration: OTPGUARD_* variables, see docs/reference.md)
  otpguard version        print the version
  otpguard config check   validate the configuration and print the effective policies
  otpguard migrate up     apply pending SQL migrations (OTPGUARD_DATABASE_URL or the SQLite file)
  otpguard migrate status list the SQL migrations and whether each is applied
  otpguard simulate [--json FILE|-] SCENARIO.yaml
                          run a scenario against the real service on a virtual clock (docs/simulate.md)
`

// serve runs the service until ctx is cancelled, then drains it.
func serve(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	a, err := app.New(ctx, cfg, app.WithOutput(stdout))
	if err != nil {
		return err
	}
	stopReload := reloadOnSIGHUP(ctx, a)
	err = a.Run(ctx)
	stopReload()
	// Close's error (audit events lost at shutdown) fails the exit too.
	return errors.Join(err, a.Close())
}

// loadConfig reads the configuration and notes the OTPGUARD_ variables it
// does not know, which serve logs and config check prints.
func loadConfig(getenv func(string) string) (*app.Config, error) {
	cfg, err := app.LoadConfig(getenv)
	if err != nil {
		return nil, err
	}
	cfg.Warnings = append(cfg.Warnings, app.UnknownSettings(environ())...)
	return cfg, nil
}
