package simulate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/otpguard/otpguard/internal/app"
)

const simulateUsage = "usage: otpguard simulate [--json FILE|-] SCENARIO.yaml"

// Command is `otpguard simulate`, for cmd/otpguard's list of subcommands.
func Command() app.Command {
	return app.Command{Name: "simulate", Run: func(ctx context.Context, args []string, env app.Env) error {
		return command(ctx, args, env.Stdout, env.Stderr)
	}, Usage: "  otpguard simulate [--json FILE|-] SCENARIO.yaml\n" +
		"                          run a scenario against the real service on a virtual clock (docs/simulate.md)\n"}
}

// command runs `otpguard simulate` with the arguments after its name: the
// table goes to stdout (or the JSON, with --json -), progress to stderr
// (docs/simulate.md).
func command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jsonOut := fs.String("json", "", "write the report as JSON to this file (- for stdout, instead of the table)")
	// The scenario may come before or after the flag.
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, simulateUsage)
	}
	rest := fs.Args()
	if len(rest) > 1 {
		if err := fs.Parse(rest[1:]); err != nil {
			return fmt.Errorf("%w\n%s", err, simulateUsage)
		}
		rest = append(rest[:1], fs.Args()...)
	}
	if len(rest) != 1 {
		return errors.New(simulateUsage)
	}
	// A run allocates much and keeps little: collecting less often
	// saves a quarter of its time.
	debug.SetGCPercent(400)
	s, err := Load(rest[0])
	if err != nil {
		return err
	}
	rep, err := Run(ctx, s, Options{Progress: stderr})
	if err != nil {
		return err
	}
	switch *jsonOut {
	case "-":
		return rep.WriteJSON(stdout)
	case "":
		return rep.WriteTable(stdout)
	}
	f, err := os.Create(*jsonOut)
	if err != nil {
		return err
	}
	if err := rep.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return rep.WriteTable(stdout)
}
