package app

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// checkAddr checks a listen address: host:port, the port a number from 0
// (any free port) to 65535, the host empty (every interface), an IP
// address or a name.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:8080 or :8080)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("%q: %q is not a host name or address", addr, host)
	}
	return nil
}

// checkDebugAddr checks OTPGUARD_DEBUG_ADDR: a listen address on loopback.
// The profiles have no authentication and show the program's inner
// workings, so they are never offered to the network; an operator reaches
// them through ssh or a port-forward.
func checkDebugAddr(addr string) error {
	if err := checkAddr(addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip, err := netip.ParseAddr(host); host == "localhost" || (err == nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("%q: the profiles have no authentication: listen on loopback (e.g. 127.0.0.1:6060) and reach it through ssh or a port-forward", addr)
}

// urlProblem is why a URL did not parse, without the URL (it may hold a
// password).
func urlProblem(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	msg := err.Error()
	if i := strings.Index(msg, "://"); i >= 0 { // a message quoting the URL
		return "malformed URL"
	}
	return msg
}

// toolSettings are OTPGUARD_ variables read by the tests, CI and the load
// command, not by the service: not reported as unknown.
var toolSettings = []string{
	"OTPGUARD_API_KEY", // otpguard-load
	"OTPGUARD_REQUIRE_SERVICES", "OTPGUARD_ARTIFACTS",
}

// UnknownSettings returns a warning for each OTPGUARD_ variable in environ
// (os.Environ's form, NAME=value) that otpguard does not read, naming the
// setting that was probably meant: a misspelt variable must not silently
// leave its default in force.
func (c *Config) UnknownSettings(environ []string) []string {
	var known []string
	for name := range c.settings {
		known = append(known, name)
	}
	known = append(known, toolSettings...)
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
