package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// nodeWatch samples /ops/status and /readyz during a master's death: each
// answer must match api/openapi.yaml, the live masters' breakers must stay
// closed in every sample, and the dead one must show not closed in some.
type nodeWatch struct {
	router routers.Router
	victim string

	mu                       sync.Mutex
	samples, victimOpen      int
	liveNotClosed, offSpec   int
	lastStatus, lastOffSpecE string
}

func newNodeWatch(t *testing.T, victim string) *nodeWatch {
	t.Helper()
	router, err := gorillamux.NewRouter(loadSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	return &nodeWatch{router: router, victim: victim}
}

// sample reads both routes on instance i once.
func (w *nodeWatch) sample(t *testing.T, c *cluster, i int) {
	st := c.doKey(t, i, "GET", "/ops/status", "", opsKey)
	rz := c.do(t, i, "GET", "/readyz", "")
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples++
	for _, x := range []struct {
		path string
		r    response
	}{{"/ops/status", st}, {"/readyz", rz}} {
		if err := w.validate(t, x.path, x.r); err != nil {
			w.offSpec++
			w.lastOffSpecE = x.path + ": " + err.Error() + ": " + string(x.r.Body)
		}
	}
	var body struct {
		Nodes []struct{ Node, Breaker string }
	}
	if json.Unmarshal(st.Body, &body) != nil {
		return
	}
	w.lastStatus = string(st.Body)
	for _, n := range body.Nodes {
		switch {
		case n.Node == w.victim && n.Breaker != "closed":
			w.victimOpen++
		case n.Node != w.victim && n.Node != "*" && n.Breaker != "closed":
			w.liveNotClosed++
		}
	}
}

// validate checks r, the answer of GET path, against the spec, and that
// it holds nothing the spec does not document.
func (w *nodeWatch) validate(t *testing.T, path string, r response) error {
	req := httptest.NewRequest("GET", path, nil)
	route, params, err := w.router.FindRoute(req)
	if err != nil {
		return err
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: r.Status, Header: r.Header, Options: opts}
	out.SetBodyBytes(r.Body)
	checkUndocumented(t, "GET "+path, route, r)
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// check reports what the samples saw.
func (w *nodeWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("status samples during the outage: %d; the dead master's breaker not closed in %d", w.samples, w.victimOpen)
	if w.offSpec > 0 {
		t.Errorf("%d answers off the spec; the last: %s", w.offSpec, w.lastOffSpecE)
	}
	if w.liveNotClosed > 0 {
		t.Errorf("a live master's breaker was not closed in %d samples; last /ops/status: %s", w.liveNotClosed, w.lastStatus)
	}
	if w.samples > 0 && w.victimOpen == 0 {
		t.Errorf("the dead master %s never showed a breaker not closed in /ops/status; last: %s", w.victim, w.lastStatus)
	}
}
