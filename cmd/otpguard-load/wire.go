package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"
)

// The wire: HTTP/1.1 written and read by hand on kept-alive connections.
// The load generator often shares its machine with the server it
// measures, so every microsecond it spends per request is taken from the
// server: it writes pre-encoded bytes and reads only the status line and
// the framing headers, a small fraction of what a general HTTP client
// costs per request.

// encoder writes the bytes of request i. The request line and headers are
// encoded once; a check's body is appended with its key's number, so a
// request costs no allocation.
type encoder struct {
	c         *Config
	checkHead []byte // POST /limits/check ... Content-Length: (the number follows)
	sendHead  []byte // POST /otp/send ...
	policy    []byte // the policy's JSON string, quoted
	prefix    []byte // the key prefix's JSON string, unquoted
}

func newEncoder(c *Config, host string) *encoder {
	head := func(path string) []byte {
		return fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: ",
			path, host, c.APIKey)
	}
	policy, _ := json.Marshal(c.Policy) // a string: cannot fail
	prefix, _ := json.Marshal(c.KeyPrefix)
	return &encoder{c: c, checkHead: head("/limits/check"), sendHead: head("/otp/send"),
		policy: policy, prefix: prefix[1 : len(prefix)-1]}
}

// appendCheck appends one check's JSON: what json.Marshal of checkJSON
// gives, without its reflection.
func (e *encoder) appendCheck(dst []byte, key uint64) []byte {
	dst = append(dst, `{"policy":`...)
	dst = append(dst, e.policy...)
	dst = append(dst, `,"key":"`...)
	dst = append(dst, e.prefix...)
	dst = strconv.AppendUint(dst, key%uint64(e.c.Keys), 10)
	dst = append(dst, `","cost":`...)
	dst = strconv.AppendInt(dst, e.c.Cost, 10)
	return append(dst, '}')
}

// appendBody appends request i's body: one check, or a batch of Batch
// checks on consecutive keys. Keys go round-robin over Keys subjects.
func (e *encoder) appendBody(dst []byte, i uint64) []byte {
	if e.c.Batch == 1 {
		return e.appendCheck(dst, i)
	}
	dst = append(dst, `{"checks":[`...)
	for j := range uint64(e.c.Batch) {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = e.appendCheck(dst, i*uint64(e.c.Batch)+j)
	}
	return append(dst, "]}"...)
}

// appendRequest appends the whole request: head, Content-Length, body.
// body is scratch space for the body; both are returned for reuse.
func (e *encoder) appendRequest(dst, body []byte, i uint64, send bool, sendNo uint64) (req, scratch []byte) {
	head := e.checkHead
	if send {
		head, body = e.sendHead, append(body[:0], e.c.sendBody(sendNo)...)
	} else {
		body = e.appendBody(body[:0], i)
	}
	dst = append(dst, head...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...), body
}

// response is what the load command reads of an answer: its status, and
// whether the connection stays open.
type response struct {
	Status    int
	KeepAlive bool
}

var errMalformed = errors.New("malformed HTTP response")

// readResponse reads one answer from r: the status line, the headers that
// frame the body (Content-Length, Transfer-Encoding: chunked, Connection),
// and the body, which it discards (the decision is in the status: 200
// allowed, 429 denied).
func readResponse(r *bufio.Reader) (response, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return response{}, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return response{}, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return response{}, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	res := response{Status: status, KeepAlive: line[7] == '1'}
	length, chunked, err := readHeaders(r, &res)
	if err != nil {
		return res, err
	}
	switch {
	case status < 200 || status == 204 || status == 304:
		// no body
	case chunked:
		err = discardChunked(r)
	case length >= 0:
		_, err = r.Discard(length)
	default: // the body runs to the connection's end
		res.KeepAlive = false
		_, err = io.Copy(io.Discard, r)
	}
	return res, err
}

// readHeaders reads the headers up to the blank line, noting the framing
// ones; length is -1 without a Content-Length.
func readHeaders(r *bufio.Reader, res *response) (length int, chunked bool, err error) {
	length = -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return length, chunked, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return length, chunked, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return length, chunked, fmt.Errorf("%w: header %q", errMalformed, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return length, chunked, fmt.Errorf("%w: Content-Length %q", errMalformed, value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				res.KeepAlive = false
			} else if bytes.EqualFold(value, []byte("keep-alive")) {
				res.KeepAlive = true
			}
		}
	}
}

// discardChunked reads a chunked body to its end, trailers included.
func discardChunked(r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseUint(string(bytes.TrimSpace(size)), 16, 32)
		if err != nil {
			return fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if n == 0 {
			_, _, err := readHeaders(r, &response{}) // the trailers
			return err
		}
		if _, err := r.Discard(int(n) + 2); err != nil { // the chunk and its CRLF
			return err
		}
	}
}

// target is where the connections go.
type target struct {
	addr string // host:port
	host string // the Host header
	tls  *tls.Config
}

func parseTarget(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, err
	}
	t := target{addr: u.Host, host: u.Host}
	port := "80"
	if u.Scheme == "https" {
		port, t.tls = "443", &tls.Config{ServerName: u.Hostname()}
	}
	if u.Port() == "" {
		t.addr = net.JoinHostPort(u.Hostname(), port)
	}
	return t, nil
}

func (t target) dial(timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", t.addr, timeout)
	if err != nil || t.tls == nil {
		return conn, err
	}
	tc := tls.Client(conn, t.tls)
	_ = tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return tc, nil
}
