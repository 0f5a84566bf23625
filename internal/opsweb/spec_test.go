package opsweb

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestSpecDescribesThePage: api/openapi.yaml's GET /ops says what the page
// is - one script of its own, which the page does without, its page sizes -
// and lists every query parameter the page reads.
func TestSpecDescribesThePage(t *testing.T) {
	b, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]struct {
			Get struct {
				Description string `yaml:"description"`
				Parameters  []struct {
					Name        string `yaml:"name"`
					Description string `yaml:"description"`
				} `yaml:"parameters"`
			} `yaml:"get"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	get := spec.Paths["/ops"].Get
	if get.Description == "" {
		t.Fatal("api/openapi.yaml has no GET /ops")
	}
	desc := strings.Join(strings.Fields(get.Description), " ")
	if strings.Contains(desc, "no scripts") {
		t.Errorf("GET /ops says the page has no scripts; it has one (templates/ops.js):\n%s", desc)
	}
	for _, want := range []string{"one script", "works without it", fmt.Sprintf("%d a page", pageBlocks), fmt.Sprintf("%d a page", pageEvents)} {
		if !strings.Contains(desc, want) {
			t.Errorf("GET /ops description lacks %q:\n%s", want, desc)
		}
	}
	params := map[string]string{}
	for _, p := range get.Parameters {
		params[p.Name] = p.Description
	}
	for name, want := range map[string]string{
		"offset": fmt.Sprintf("pages of %d", pageBlocks),
		"before": fmt.Sprintf("pages of %d", pageEvents),
	} {
		if !strings.Contains(params[name], want) {
			t.Errorf("GET /ops parameter %s says %q, want %q", name, params[name], want)
		}
	}
	for _, name := range []string{"phone", "country", "done", "err", "offset", "refresh", "action", "outcome", "number",
		"ev_country", "since", "until", "before", "ov_kind", "ov_subject", "ov_limit", "ov_expires_in", "ov_reason"} {
		if _, ok := params[name]; !ok {
			t.Errorf("GET /ops does not list the query parameter %s the page reads", name)
		}
	}
}
