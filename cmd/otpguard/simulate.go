package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/otpguard/otpguard/internal/simulate"
)

const simulateUsage = "usage: otpguard simulate [--json FILE|-] SCENARIO.yaml"

// simulateCmd runs `otpguard simulate`: the table goes to stdout (or the
// JSON, with --json -), progress to stderr (docs/simulate.md).
func simulateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	s, err := simulate.Load(rest[0])
	if err != nil {
		return err
	}
	rep, err := simulate.Run(ctx, s, simulate.Options{Progress: stderr})
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
