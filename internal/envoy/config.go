// Package envoy is Envoy's rate-limit protocol: the gRPC service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and the
// loader of envoyproxy/ratelimit's configuration format. Each rule of the
// files becomes an otpguard limit policy, decided by limit.Limiter like
// any /limits/check (docs/envoy.md).
package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML of envoyproxy/ratelimit's configuration files, as its README
// documents it. Unknown fields are refused, as the peer refuses them.

type fileRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []fileDescriptor `yaml:"descriptors"`
}

type fileDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *fileRateLimit   `yaml:"rate_limit"`
	Descriptors    []fileDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Metadata       fileMetadata     `yaml:"metadata"`
}

type fileRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []fileReplaces `yaml:"replaces"`
}

type fileReplaces struct {
	Name string `yaml:"name"`
}

// fileMetadata is the descriptor's metadata: free-form for the peer (it
// hands it back in dynamic metadata), and the home of otpguard's own
// extension under "otpguard", which the peer ignores (docs/envoy.md).
type fileMetadata struct {
	OTPGuard *Extension     `yaml:"otpguard"`
	Rest     map[string]any `yaml:",inline"`
}

// Extension is what an Envoy rule may ask of otpguard beyond the peer's
// format, under metadata.otpguard: another algorithm, what to do when
// Redis cannot answer, and hot-key counting.
type Extension struct {
	// Algorithm is fixed_window (the default: the peer's window, aligned
	// to the unit) or token_bucket.
	Algorithm string `yaml:"algorithm"`
	// Capacity and RefillPerSecond shape a token bucket; by default
	// requests_per_unit tokens, refilled over one unit.
	Capacity        int64   `yaml:"capacity"`
	RefillPerSecond float64 `yaml:"refill_per_second"`
	// OnStoreError is open (the default), local or closed, as in the
	// policy file; LocalLimit goes with local.
	OnStoreError string `yaml:"on_store_error"`
	LocalLimit   int64  `yaml:"local_limit"`
	// Mode sync counts a token bucket's hot keys locally (hot keys).
	Mode         string `yaml:"mode"`
	SyncInterval string `yaml:"sync_interval"`
}

// File is one configuration file, read.
type File struct {
	Name string
	root fileRoot
}

// ReadFiles reads the configuration at path: a YAML file, or every .yaml
// and .yml file under a directory (names starting with a dot skipped: a
// Kubernetes ConfigMap's ..data holds the same files again). Files are
// read in lexical order, as the peer's runtime loader reads them.
//
// read reads one file. It is the caller's, so that what a configuration
// file may be (a regular file, not a FIFO or a device; its size bound) is
// decided in one place for every file the caller reads: the directory
// lists names, and a name alone says nothing of what it points to.
func ReadFiles(path string, read func(name string) ([]byte, error)) ([]File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("envoy config: %w", err)
	}
	var names []string
	if !info.IsDir() {
		names = []string{path}
	} else {
		err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != path && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
				names = append(names, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("envoy config: %w", err)
		}
		slices.Sort(names)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("envoy config: no .yaml file in %s", path)
	}
	files := make([]File, 0, len(names))
	for _, n := range names {
		b, err := read(n)
		if err != nil {
			return nil, fmt.Errorf("envoy config: %w", err)
		}
		f, err := ParseFile(n, b)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// ParseFile parses one configuration file's content; name is for errors.
func ParseFile(name string, b []byte) (File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var root fileRoot
	// An empty file (io.EOF) is read as one without a domain, and refused for that.
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return File{}, fmt.Errorf("%s: %w", name, err)
	}
	return File{Name: name, root: root}, nil
}
