package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// The edges: what a hostile caller sends straight to the API listener,
// byte for byte. Each case runs on a connection of its own against the
// real program; the answers are read as they come off the wire.

// rawAnswer is what came back on one connection: the responses in order
// and whether the server closed the connection after them.
type rawAnswer struct {
	statuses []int
	headers  []http.Header
	bodies   []string
	closed   bool
	// continued: a 100 Continue came before the final answer.
	continued bool
}

// raw writes req on a new connection to addr, then body after a pause
// (nil: none), and reads every response until the server closes the
// connection or a second passes without a byte.
func raw(t *testing.T, addr, req string, body []byte) rawAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	var a rawAnswer
	br := bufio.NewReader(conn)
	first := true
	for {
		if err := conn.SetReadDeadline(time.Now().Add(3 * time.Second)); err != nil {
			t.Fatalf("%.60q: %v", req, err)
		}
		if _, err := br.Peek(1); err != nil {
			a.closed = err == io.EOF || isReset(err)
			return a
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%.60q: reading the answer: %v", req, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusContinue {
			a.continued = true
			continue
		}
		a.statuses = append(a.statuses, res.StatusCode)
		a.headers = append(a.headers, res.Header)
		a.bodies = append(a.bodies, string(b))
		if first && body != nil {
			// The answer came before the body was sent: nothing of it was
			// needed. Send it now as a client that did not wait would.
			_, _ = conn.Write(body) // the server may already have closed: the answer says what it did
		}
		first = false
	}
}

func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset")
}

// Strings a hostile caller puts into requests, and that must never reach
// a log line: a full number and a code (the program never sends to this
// number, so the console sender never prints them either).
const (
	edgePhone = "+14155550123"
	edgeCode  = "918273"
)

// TestEdgeBattery: paths, framing, malformed targets, limits and methods
// sent raw to the real program. Every refusal is a 4xx (a gateway ejects
// an instance on 5xx), a rewritten path never reaches the route it
// resembles, a body is never read before the key is checked, the framing
// of RFC 9112 holds (no request smuggled inside a body), the header limit
// is the one documented, and no byte of any request (keys, numbers, codes)
// reaches a log line at any level.
func TestEdgeBattery(t *testing.T) {
	p := boot(t, map[string]string{
		"OTPGUARD_CONFIG":    "../../docs/bench/policies.yaml",
		"OTPGUARD_LOG_LEVEL": "debug",
		// Keys of the test's own: embedded mode prints the keys it makes.
		"OTPGUARD_API_KEYS": "edge-api-key-0123456789abcdef",
		"OTPGUARD_OPS_KEYS": "edge-ops-key-0123456789abcdef",
	})
	var mu sync.Mutex
	var logged []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range p.lines {
			b, _ := json.Marshal(m)
			mu.Lock()
			logged = append(logged, string(b))
			mu.Unlock()
		}
	}()
	u, _ := url.Parse(p.url)
	addr := u.Host
	auth := "Authorization: Bearer " + p.key + "\r\n"
	opsAuth := "Authorization: Bearer " + p.opsKey + "\r\n"
	check := `{"policy":"once","key":"edge"}`
	post := func(target, headers, body string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", target, headers, len(body), body)
	}

	t.Run("paths", func(t *testing.T) {
		// Every form of /limits/check that net/http does not route there
		// is refused, and the key "edge" (one hit an hour) stays unspent.
		for _, target := range []string{
			"/x/../limits/check", "//limits/check", "/limits//check", "/limits/./check",
			"/limits%2fcheck", "/limits%2Fcheck", "/%6cimits/check", "/limits/check#frag",
			"/limits/check%23frag", "/LIMITS/CHECK", "/limits/check/..",
		} {
			a := raw(t, addr, post(target, auth, check), nil)
			if len(a.statuses) != 1 || a.statuses[0] < 400 || a.statuses[0] >= 500 {
				t.Errorf("POST %s: answers %v, want one 4xx", target, a.statuses)
			}
		}
		for _, req := range []string{
			"GET /ops/status#frag HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + opsAuth + "\r\n",
			"GET //evil.example/ops/status HTTP/1.0\r\n" + opsAuth + "\r\n",
			"GET /ops/../ops/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + opsAuth + "\r\n",
		} {
			a := raw(t, addr, req, nil)
			if len(a.statuses) != 1 || a.statuses[0] < 400 || a.statuses[0] >= 500 {
				t.Errorf("%.50q: answers %v, want one 4xx", req, a.statuses)
			}
		}
		a := raw(t, addr, post("/limits/check", auth, check), nil)
		if len(a.statuses) != 1 || a.statuses[0] != http.StatusOK {
			t.Errorf("the real path after the rewritten ones: %v %v, want 200 (none of them spent the key)", a.statuses, a.bodies)
		}
	})

	t.Run("malformed targets", func(t *testing.T) {
		for _, req := range []string{
			"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
			"GET /ops/blocked/%zz HTTP/1.1\r\nHost: x\r\n" + opsAuth + "\r\n",
			"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n",
			"GET /otp/send/" + edgePhone + "/" + edgeCode + "/%zz HTTP/1.1\r\nHost: x\r\n\r\n",
			"GET http://[::1 HTTP/1.1\r\nHost: x\r\n\r\n",
			"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
			"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",
			"BREW /limits/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth + "\r\n",
			"GET /limits/check HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + auth + "\r\n",
			"GET /ops/status HTTP/1.1\r\nHost: x\r\nHost: y\r\n" + opsAuth + "\r\n",
		} {
			a := raw(t, addr, req, nil)
			if len(a.statuses) != 1 || a.statuses[0] < 400 || a.statuses[0] >= 500 {
				t.Errorf("%.50q: answers %v, want one 4xx", req, a.statuses)
			}
		}
		// Two answers net/http gives itself, before any route: OPTIONS *
		// (the server's options, an empty 200) and a version it does not
		// speak (505, RFC 9110 15.6.6; no gateway forwards one).
		for _, c := range []struct {
			req  string
			want int
		}{
			{"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200},
			{"POST /limits/check HTTP/9.9\r\nHost: x\r\n\r\n", 505},
		} {
			a := raw(t, addr, c.req, nil)
			if len(a.statuses) != 1 || a.statuses[0] != c.want || a.bodies[0] != "" && c.want == 200 {
				t.Errorf("%.50q: answers %v %q, want %d", c.req, a.statuses, a.bodies, c.want)
			}
		}
	})

	t.Run("framing", func(t *testing.T) {
		wide := `{"policy":"wide","key":"framing"}`
		smuggled := "GET /otp/send HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n"
		for _, c := range []struct {
			name, req string
			want      int
		}{
			// An unknown transfer coding: net/http answers 501 (RFC 9112
			// 6.1) and closes; the body is never parsed as a request.
			{"transfer-encoding identity", "POST /limits/check HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: identity\r\n\r\n" + smuggled, 501},
			{"chunked not last", "POST /limits/check HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n" + smuggled, 501},
			{"two lengths", "POST /limits/check HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 0\r\nContent-Length: 80\r\n\r\n" + smuggled, 400},
			// Both: the transfer coding decides the body, and the
			// connection closes after the answer (RFC 9112 6.1), so what
			// a peer reading Content-Length took for a body is never
			// served.
			{"length and chunked", "POST /limits/check HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" +
				fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(wide), wide) + smuggled, 200},
			{"space before colon", "POST /limits/check HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length : 0\r\n\r\n" + smuggled, 400},
			{"no host", "POST /limits/check HTTP/1.1\r\n" + auth + "Content-Length: 0\r\n\r\n" + smuggled, 400},
			{"bad chunk size", "POST /limits/check HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\nzz\r\n\r\n" + smuggled, 400},
		} {
			a := raw(t, addr, c.req, nil)
			if len(a.statuses) != 1 || a.statuses[0] != c.want || !a.closed {
				t.Errorf("%s: answers %v (closed %v), want one %d and the connection closed", c.name, a.statuses, a.closed, c.want)
			}
		}
	})

	t.Run("no body before the key", func(t *testing.T) {
		// Headers only, announcing a body: the answer comes before any of
		// it is sent, and no 100 Continue invites it.
		big := strings.Repeat("x", 400<<10)
		for _, c := range []struct{ name, req string }{
			{"expect continue, no key", "POST /otp/send HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 409600\r\n\r\n"},
			{"expect continue, ops key", "POST /limits/check HTTP/1.1\r\nHost: x\r\n" + opsAuth + "Expect: 100-continue\r\nContent-Length: 409600\r\n\r\n"},
			{"no expect, no key", "POST /limits/check HTTP/1.1\r\nHost: x\r\nContent-Length: 409600\r\n\r\n"},
			{"no expect, wrong key", "POST /ops/trusted-numbers HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 409600\r\n\r\n"},
		} {
			a := raw(t, addr, c.req, []byte(big))
			if len(a.statuses) != 1 || a.statuses[0] != 401 && a.statuses[0] != 403 && a.statuses[0] != 413 || a.continued {
				t.Errorf("%s: answers %v (100 Continue %v) with the body unsent, want one 401, 403 or 413 and no 100 Continue", c.name, a.statuses, a.continued)
			}
		}
		// A valid key past the route's limit: 413 at once, unread.
		a := raw(t, addr, "POST /limits/check HTTP/1.1\r\nHost: x\r\n"+auth+"Expect: 100-continue\r\nContent-Length: 409600\r\n\r\n", []byte(big))
		if len(a.statuses) != 1 || a.statuses[0] != 413 || a.continued {
			t.Errorf("a check past its body limit: %v (100 Continue %v), want 413 with the body unsent", a.statuses, a.continued)
		}
	})

	t.Run("header limit", func(t *testing.T) {
		// The documented limit: a header of up to 20 KiB is read, past it
		// 431.
		for _, c := range []struct {
			size int
			want int
		}{{19 << 10, 401}, {21 << 10, 431}, {64 << 10, 431}} {
			req := "GET /ops/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: " + strings.Repeat("p", c.size) + "\r\n\r\n"
			a := raw(t, addr, req, nil)
			if len(a.statuses) != 1 || a.statuses[0] != c.want {
				t.Errorf("a %d B header: answers %v, want %d", c.size, a.statuses, c.want)
			}
		}
	})

	t.Run("nothing of a request in the log", func(t *testing.T) {
		body := `{"phone":"` + edgePhone + `","code":"` + edgeCode + `"}`
		for _, req := range []string{
			"POST /otp/verify HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 3\r\n\r\n" + body,
			"POST /otp/verify HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: zz\r\n\r\n" + body,
			"POST /otp/verify?phone=" + edgePhone + "&code=" + edgeCode + " HTTP/1.1\r\nHost: x\r\n" + auth + opsAuth + "Transfer-Encoding: gzip\r\n\r\n" + body,
			"POST /otp/" + edgePhone + "/" + edgeCode + " HTTP/1.1\r\n" + auth + "\r\n\r\n",
			"POST /otp/verify HTTP/1.1\r\nHost: x\r\n" + auth + "X-" + edgeCode + ": " + edgePhone + "\r\n bad fold\r\n\r\n",
			"\x16\x03\x01\x00" + auth + edgePhone + edgeCode + "\r\n\r\n", // TLS to a plain listener
			"POST /otp/verify HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)+2) + "\r\n\r\n{" + body[:len(body)-1] + ",}",
		} {
			raw(t, addr, req, nil)
		}
	})

	// Every case has been answered; the log lines they caused are written
	// by now or within the stop below.
	if err := p.stop(t, 20*time.Second); err != nil {
		t.Errorf("run returned %v after shutdown, want nil", err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(logged) == 0 {
		t.Fatal("no log line read")
	}
	for _, l := range logged {
		for name, secret := range map[string]string{"the API key": p.key, "the ops key": p.opsKey, "a full number": edgePhone, "a code": edgeCode} {
			if strings.Contains(l, secret) {
				t.Errorf("%s in the log: %s", name, l)
			}
		}
	}
}

// TestAuditRequestIDsOverKeepAlive: sends over a few keep-alive
// connections, each with a request ID of its own, leave audit rows that
// carry exactly their own request's ID: the IDs kept by the audit queue
// must not be overwritten by the next request on the same connection.
func TestAuditRequestIDsOverKeepAlive(t *testing.T) {
	p := boot(t, map[string]string{"OTPGUARD_REDIS_TIMEOUT": "1s"})
	go drainLines(p)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 4, MaxIdleConnsPerHost: 4}}
	const sends = 120
	want := map[string]string{} // request ID -> number
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range sends {
		phone := fmt.Sprintf("+1415555%04d", 1000+i)
		id := fmt.Sprintf("keepalive-%03d", i)
		want[id] = phone
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", p.url+"/otp/send", strings.NewReader(`{"phone":"`+phone+`","client_ip":"203.0.113.`+fmt.Sprint(i%200)+`"}`))
			req.Header.Set("Authorization", "Bearer "+p.key)
			req.Header.Set("X-Request-Id", id)
			res, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body) // only the status is counted
			res.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if got := res.Header.Get("X-Request-Id"); got != id {
				t.Errorf("send %s answered with X-Request-Id %q", id, got)
			}
		}()
	}
	wg.Wait()
	got := map[string]string{}
	waitFor(t, 20*time.Second, "every send's audit row", func() bool {
		clear(got)
		status, body := p.opsCall(t, "GET", "/ops/events?action=otp.send&limit=1000", "")
		if status != 200 {
			t.Fatalf("GET /ops/events: %d %v", status, body)
		}
		events, _ := body["events"].([]any)
		for _, e := range events {
			m, _ := e.(map[string]any)
			id, _ := m["request_id"].(string)
			phone, _ := m["phone"].(string)
			got[id] = phone
		}
		return len(events) >= sends
	})
	wrong := 0
	for id, phone := range want {
		if got[id] != phone {
			wrong++
			if wrong <= 5 {
				t.Errorf("request %s sent to %s: its audit row carries %q", id, phone, got[id])
			}
		}
	}
	if wrong > 0 || len(got) != sends {
		t.Errorf("%d of %d audit rows carry another request's ID (%d distinct IDs)", wrong, sends, len(got))
	}
}
