package deploy_test

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestImage builds the image with deploy/image.sh (podman, from nothing
// but this machine) and inspects it without running it (containers do not
// run everywhere podman builds): a non-root user, the entrypoint, the
// exposed port, exactly the files it should hold (no shell), its size, and
// the binary inside it stamped with the version and commit.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image: not in -short")
	}
	podman, err := exec.LookPath("podman")
	if err != nil {
		redistest.Unavailable(t, "podman is not installed (apt-get install -y podman)")
	}
	tag := "localhost/otpguard-test:" + strings.TrimPrefix(filepath.Base(t.TempDir()), "TestImage")
	build := exec.Command("bash", "image.sh", tag)
	build.Stderr = os.Stderr
	if out, err := build.Output(); err != nil || strings.TrimSpace(string(out)) != tag {
		t.Fatalf("deploy/image.sh %s: %v (printed %q)", tag, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(podman, "rmi", "-f", tag).CombinedOutput(); err != nil {
			t.Logf("podman rmi %s: %v (printed %q)", tag, err, out) // a leftover image, not a failure
		}
	})

	var inspect []struct {
		Size   int64
		Config struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			ExposedPorts map[string]any
			Env          []string
			Labels       map[string]string
		}
	}
	out, err := exec.Command(podman, "image", "inspect", tag).Output()
	if err != nil || json.Unmarshal(out, &inspect) != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v %s", err, out)
	}
	img := inspect[0]
	if img.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", img.Config.User)
	}
	if !slices.Equal(img.Config.Entrypoint, []string{"/usr/local/bin/otpguard"}) || !slices.Equal(img.Config.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %v cmd %v, want [/usr/local/bin/otpguard] [serve]", img.Config.Entrypoint, img.Config.Cmd)
	}
	if _, ok := img.Config.ExposedPorts["8080/tcp"]; !ok || len(img.Config.ExposedPorts) != 1 {
		t.Errorf("exposed ports %v, want 8080/tcp alone", img.Config.ExposedPorts)
	}
	if !slices.Contains(img.Config.Env, "OTPGUARD_ADDR=0.0.0.0:8080") {
		t.Errorf("env %v, want OTPGUARD_ADDR=0.0.0.0:8080", img.Config.Env)
	}
	if img.Size <= 0 || img.Size > 80<<20 {
		t.Errorf("image size %d B, want under 80 MiB", img.Size)
	}
	version := img.Config.Labels["org.opencontainers.image.version"]
	commit := img.Config.Labels["org.opencontainers.image.revision"]
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-dev\+[0-9a-f]{12})?$`).MatchString(version) || len(commit) != 40 {
		t.Errorf("labels version %q revision %q, want a semantic version and a commit", version, commit)
	}

	files, binary := imageFiles(t, podman, tag)
	want := []string{"data/", "etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/otpguard"}
	var got []string
	for _, f := range files {
		if !strings.HasSuffix(f, "/") || f == "data/" { // directories on the way are fine
			got = append(got, f)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the image holds %v, want exactly %v (no shell, nothing else)", got, want)
	}
	// The binary inside runs here (it is static) and names its build.
	bin := filepath.Join(t.TempDir(), "otpguard")
	if err := os.WriteFile(bin, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(v), "otpguard "+version+" (commit "+commit+", go") {
		t.Errorf("the image's otpguard version: %q %v, want version %s and commit %s", v, err, version, commit)
	}
}

// imageFiles saves the image as a docker archive and lists the files of
// its layers, and returns the otpguard binary's bytes.
func imageFiles(t *testing.T, podman, tag string) ([]string, []byte) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "image.tar")
	if out, err := exec.Command(podman, "save", "--format", "docker-archive", "-o", archive, tag).CombinedOutput(); err != nil {
		t.Fatalf("podman save: %v %s", err, out)
	}
	layers := map[string][]byte{}
	var manifest []struct{ Layers []string }
	readTar(t, archive, func(name string, r io.Reader) {
		b, _ := io.ReadAll(r)
		if name == "manifest.json" {
			if err := json.Unmarshal(b, &manifest); err != nil {
				t.Fatal(err)
			}
			return
		}
		layers[name] = b
	})
	if len(manifest) != 1 {
		t.Fatalf("manifest.json: %v", manifest)
	}
	var files []string
	var binary []byte
	for _, l := range manifest[0].Layers {
		tr := tar.NewReader(strings.NewReader(string(layers[l])))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l, err)
			}
			name := strings.TrimPrefix(h.Name, "./")
			files = append(files, name)
			if name == "usr/local/bin/otpguard" {
				binary, _ = io.ReadAll(tr)
			}
		}
	}
	return files, binary
}

func readTar(t *testing.T, path string, each func(name string, r io.Reader)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		each(h.Name, tr)
	}
}
