// Command otpguard guards SMS/OTP sending and shared rate limits for many
// stateless app servers, keeping every limit in one shared Redis.
// `otpguard help` lists its subcommands; serve is the default.
//
// This package only reads the command line and dispatches: internal/app
// builds and runs the service, and each subcommand parses its own flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/simulate"
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

// commands are otpguard's subcommands, in the order of the usage text.
func commands() []app.Command { return append(app.Commands(), simulate.Command()) }

// run is the whole program, with its outside world passed in, so that a
// test can boot it on port 0 and stop it by cancelling ctx.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	name := "serve"
	if len(args) > 1 {
		name = args[1]
	}
	env := app.Env{Getenv: getenv, Environ: environ, Stdout: stdout, Stderr: os.Stderr}
	for _, c := range commands() {
		if c.Name == name {
			return c.Run(ctx, args[min(2, len(args)):], env)
		}
	}
	switch name {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage())
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", name, usage())
}

// usage is the usage text, a line or two per subcommand.
func usage() string {
	var b strings.Builder
	b.WriteString("usage:\n")
	for _, c := range commands() {
		b.WriteString(c.Usage)
	}
	return b.String()
}
