package config

import (
	"fmt"
	"net"

	"github.com/otpguard/otpguard/internal/envoy"
)

// EnvoyConfig is the gRPC listener that answers Envoy's rate-limit filter
// and the rules it decides by (docs/envoy.md): OTPGUARD_GRPC_ADDR,
// OTPGUARD_ENVOY_CONFIG, the TLS files and the bounds of a call
// (settings.go).
type EnvoyConfig struct {
	Server envoy.ServerConfig
	Path   string
	// MaxDescriptors and MaxEntries bound a call: descriptors per request
	// (OTPGUARD_ENVOY_MAX_DESCRIPTORS), entries per descriptor
	// (OTPGUARD_ENVOY_MAX_ENTRIES).
	MaxDescriptors, MaxEntries int
	// Rules are Path's files, read and checked by Load.
	Rules *envoy.Rules
}

// On reports whether the gRPC listener is configured.
func (e EnvoyConfig) On() bool { return e.Server.Addr != "" }

// ReadEnvoyRules reads and loads the Envoy configuration at path, each
// file as the policy file is read (readConfigFile): a FIFO, a device or a
// file over 1 MiB is refused without blocking or filling memory, at
// start-up as at a reload.
func ReadEnvoyRules(path string) (*envoy.Rules, error) {
	files, err := envoy.ReadFiles(path, readConfigFile)
	if err != nil {
		return nil, fmt.Errorf("OTPGUARD_ENVOY_CONFIG: %w", err)
	}
	rules, err := envoy.Load(files)
	if err != nil {
		return nil, fmt.Errorf("OTPGUARD_ENVOY_CONFIG: %w", err)
	}
	return rules, nil
}

// checkGRPCAddr: a host:port, when set.
func checkGRPCAddr(c *Config) error {
	if !c.Envoy.On() {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Envoy.Server.Addr); err != nil {
		return err
	}
	return nil
}

// checkEnvoyMaxDescriptors: 1..1000 (a request of 1000 is 50 round trips).
func checkEnvoyMaxDescriptors(c *Config) error {
	if n := c.Envoy.MaxDescriptors; n < 1 || n > 1000 {
		return fmt.Errorf("must be between 1 and 1000, got %d", n)
	}
	return nil
}

// checkEnvoyMaxEntries: 1..1000.
func checkEnvoyMaxEntries(c *Config) error {
	if n := c.Envoy.MaxEntries; n < 1 || n > 1000 {
		return fmt.Errorf("must be between 1 and 1000, got %d", n)
	}
	return nil
}

// checkEnvoy: the listener and its rules come together, and TLS has what
// it needs.
func (c *Config) checkEnvoy() error {
	var cs complaints
	e, s := c.Envoy, c.Envoy.Server
	switch {
	case e.On() && e.Path == "":
		cs.add("OTPGUARD_ENVOY_CONFIG: required with OTPGUARD_GRPC_ADDR (the rate-limit rules the gateways' descriptors are decided by)")
	case !e.On() && e.Path != "":
		cs.add("OTPGUARD_GRPC_ADDR: required with OTPGUARD_ENVOY_CONFIG (no listener would read the rules)")
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		cs.add("OTPGUARD_GRPC_TLS_CERT_FILE and OTPGUARD_GRPC_TLS_KEY_FILE: set both for TLS, or neither")
	}
	if s.ClientCAFile != "" && s.CertFile == "" {
		cs.add("OTPGUARD_GRPC_CLIENT_CA_FILE: mTLS needs TLS: set OTPGUARD_GRPC_TLS_CERT_FILE and OTPGUARD_GRPC_TLS_KEY_FILE too")
	}
	if !e.On() && (s.CertFile != "" || s.KeyFile != "" || s.ClientCAFile != "") {
		cs.add("OTPGUARD_GRPC_TLS_*: only with OTPGUARD_GRPC_ADDR")
	}
	return cs.err()
}
