package app

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/otpguard/otpguard/internal/config"
)

// Command is one of otpguard's subcommands: cmd/otpguard lists them once,
// writes its usage text from their Usage and hands each its arguments.
type Command struct {
	Name string
	// Usage is the command's lines of the usage text, each ending in a
	// newline.
	Usage string
	// Run runs the command with the arguments after its name.
	Run func(ctx context.Context, args []string, env Env) error
}

// Env is the program's outside world, passed in so that a test can boot
// the real program: its environment and its output.
type Env struct {
	Getenv func(string) string
	// Environ lists the environment (os.Environ's form), for the warning
	// about OTPGUARD_ variables otpguard does not know.
	Environ        func() []string
	Stdout, Stderr io.Writer
}

// Commands are the subcommands app runs: serve (the default), version,
// config check and migrate.
func Commands() []Command {
	return []Command{
		{Name: "serve", Run: serve,
			Usage: "  otpguard [serve]        serve the API (configuration: OTPGUARD_* variables, see docs/reference.md)\n"},
		{Name: "version", Run: printVersion,
			Usage: "  otpguard version        print the version\n"},
		{Name: "config", Run: checkConfig,
			Usage: "  otpguard config check   validate the configuration and print the effective policies\n"},
		{Name: "migrate", Run: migrate,
			Usage: "  otpguard migrate up     apply pending SQL migrations (OTPGUARD_DATABASE_URL or the SQLite file)\n" +
				"  otpguard migrate status list the SQL migrations and whether each is applied\n"},
	}
}

// serve runs the service until ctx is cancelled, then drains it; SIGHUP
// reloads its policies meanwhile.
func serve(ctx context.Context, _ []string, env Env) error {
	cfg, err := config.LoadWithWarnings(env.Getenv, env.Environ())
	if err != nil {
		return err
	}
	a, err := New(ctx, cfg, WithOutput(env.Stdout))
	if err != nil {
		return err
	}
	stopReload := reloadOnSIGHUP(ctx, a)
	err = a.Run(ctx)
	stopReload()
	// Close's error (audit events lost at shutdown) fails the exit too.
	return errors.Join(err, a.Close())
}

func printVersion(_ context.Context, _ []string, env Env) error {
	fmt.Fprintln(env.Stdout, "otpguard", Build())
	return nil
}

// checkConfig runs `otpguard config check` (internal/config).
func checkConfig(ctx context.Context, args []string, env Env) error {
	return config.CheckCommand(ctx, args, env.Getenv, env.Environ(), env.Stdout)
}

// migrate runs `otpguard migrate up|status`.
func migrate(ctx context.Context, args []string, env Env) error {
	if len(args) != 1 || (args[0] != "up" && args[0] != "status") {
		return errors.New("usage: otpguard migrate up|status")
	}
	cfg, err := config.Load(env.Getenv)
	if err != nil {
		return err
	}
	return runMigrations(ctx, cfg, args[0] == "up", env.Stdout)
}
