package simulate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/otpguard/otpguard/internal/app"
)

const simulateUsage = "usage: otpguard simulate [--json FILE|-] [--html FILE] SCENARIO.yaml"

// Command is `otpguard simulate`, for cmd/otpguard's list of subcommands.
func Command() app.Command {
	return app.Command{Name: "simulate", Run: func(ctx context.Context, args []string, env app.Env) error {
		return command(ctx, args, env.Stdout, env.Stderr)
	}, Usage: "  otpguard simulate [--json FILE|-] [--html FILE] SCENARIO.yaml\n" +
		"                          run a scenario against the real service on a virtual clock (docs/simulate.md)\n"}
}

// command runs `otpguard simulate` with the arguments after its name: the
// table goes to stdout (or the JSON, with --json -), progress to stderr,
// and the report to the files --json and --html name (docs/simulate.md).
func command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	jsonOut := fs.String("json", "", "write the report as JSON to this file (- for stdout, instead of the table)")
	htmlOut := fs.String("html", "", "write the report as one self-contained HTML page to this file")
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
	if *htmlOut != "" {
		if err := writeFile(*htmlOut, func(w io.Writer) error { return rep.WriteHTML(w, filepath.Base(rest[0])) }); err != nil {
			return err
		}
	}
	switch *jsonOut {
	case "-":
		return rep.WriteJSON(stdout)
	case "":
		return rep.WriteTable(stdout)
	}
	if err := writeFile(*jsonOut, rep.WriteJSON); err != nil {
		return err
	}
	return rep.WriteTable(stdout)
}

// writeFile creates the file at path and has write fill it.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
