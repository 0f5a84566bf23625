package config

import (
	"fmt"
	"slices"
	"strings"
)

// UnknownSettings returns a warning for each OTPGUARD_ variable in environ
// (os.Environ's form, NAME=value) that otpguard does not read, naming the
// setting that was probably meant: a misspelt variable must not silently
// leave its default in force. The names known are the list's (settings.go).
func UnknownSettings(environ []string) []string {
	known := slices.Clone(toolSettings)
	for _, s := range settings {
		known = append(known, s.name)
		if s.secret {
			known = append(known, s.name+"_FILE")
		}
	}
	slices.Sort(known)
	var warns []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "OTPGUARD_") || slices.Contains(known, name) ||
			strings.HasPrefix(name, "OTPGUARD_TEST_") {
			continue
		}
		w := name + " is not an otpguard setting and is ignored"
		if near := nearest(name, known); near != "" {
			w += fmt.Sprintf(" (did you mean %s?)", near)
		}
		warns = append(warns, w)
	}
	slices.Sort(warns)
	return warns
}

// nearest returns the candidate closest to name by edit distance, when it
// is close enough to be a slip (at most a third of name's length, and at
// least 1 edit away); "" when none is.
func nearest(name string, candidates []string) string {
	best, bestD := "", len(name)/3+1
	for _, c := range candidates {
		if d := editDistance(name, c); d > 0 && d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes: the
// names compared are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
