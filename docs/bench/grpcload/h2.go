package main

// The lean client (the default): gRPC's wire format written and read by
// hand on one HTTP/2 connection per -conns, one call in flight on each, as
// Envoy's own HTTP/2 codec carries its rate-limit calls. The requests are
// encoded once before the clock starts; a call is one write (its HEADERS
// and DATA frames) and the reads of the answer's frames on the caller's
// goroutine, with no transport goroutines, codec or per-call allocation.
// The server meets the same frames as from grpc-go's client (and Envoy):
// HEADERS, DATA with END_STREAM, static flow-control windows, and the
// client answers the server's SETTINGS and PINGs and honours its
// connection window. -grpcgo drives grpc-go's client instead: the same
// load at about twice the client's CPU per call, on the same two cores as
// the servers (docs/benchmarks-log.md, "The load client's share").

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

const method = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// The client's flow-control windows, as grpcload's grpc-go client sets them
// (and Envoy's defaults allow): 64 KiB a stream, 1 MiB the connection.
const (
	h2StreamWindow = 64 << 10
	h2ConnWindow   = 1 << 20
)

// encodeRequests is every request the load draws from, as gRPC messages
// (the 5-byte length prefix and the proto), value i at index i.
func encodeRequests(c config) ([][]byte, error) {
	msgs := make([][]byte, c.values)
	for i := range msgs {
		b, err := proto.Marshal(call(c, i))
		if err != nil {
			return nil, err
		}
		m := make([]byte, 5+len(b))
		binary.BigEndian.PutUint32(m[1:5], uint32(len(b)))
		copy(m[5:], b)
		msgs[i] = m
	}
	return msgs, nil
}

// h2conn is one HTTP/2 connection carrying one call at a time.
type h2conn struct {
	conn      net.Conn
	bw        *bufio.Writer
	fr        *http2.Framer
	enc       *hpack.Encoder
	hbuf      bytes.Buffer
	dec       *hpack.Decoder
	authority string
	stream    uint32 // the last stream's id
	sendWin   int64  // the server's connection window for our DATA
	unacked   int    // DATA bytes read since our last WINDOW_UPDATE
	// The answer of the call under way.
	msg       []byte
	status    string
	statusSet bool
}

func dialH2(addr string) (*h2conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := &h2conn{conn: nc, bw: bufio.NewWriterSize(nc, 4096), authority: addr, sendWin: 65535}
	h.fr = http2.NewFramer(h.bw, bufio.NewReaderSize(nc, 4096))
	h.fr.SetReuseFrames()
	h.enc = hpack.NewEncoder(&h.hbuf)
	h.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == "grpc-status" {
			h.status, h.statusSet = f.Value, true
		}
	})
	if _, err := h.bw.WriteString(http2.ClientPreface); err != nil {
		return nil, err
	}
	if err := h.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow}); err != nil {
		return nil, err
	}
	if err := h.fr.WriteWindowUpdate(0, h2ConnWindow-65535); err != nil {
		return nil, err
	}
	return h, h.bw.Flush()
}

func (h *h2conn) Close() error { return h.conn.Close() }

// roundTrip sends one request (a gRPC message) and reads its answer:
// whether the call succeeded (grpc-status 0) and the answer's overall code.
func (h *h2conn) roundTrip(msg []byte) (pb.RateLimitResponse_Code, error) {
	code, ok, err := h.exchange(msg)
	if err != nil {
		return 0, &connError{err}
	}
	if !ok {
		return 0, fmt.Errorf("grpc-status %q", h.status)
	}
	return code, nil
}

// connError is a failure of the connection, not of a call: the
// connection carries no more calls.
type connError struct{ err error }

func (e *connError) Error() string { return "connection: " + e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// exchange is roundTrip's work; ok is grpc-status 0.
func (h *h2conn) exchange(msg []byte) (code pb.RateLimitResponse_Code, ok bool, err error) {
	for h.sendWin < int64(len(msg)) { // the server's window first
		if _, err := h.readFrame(); err != nil {
			return 0, false, err
		}
	}
	if err := h.send(msg); err != nil {
		return 0, false, err
	}
	h.msg, h.status, h.statusSet = h.msg[:0], "", false
	for {
		done, err := h.readFrame()
		if err != nil {
			return 0, false, err
		}
		if done {
			break
		}
	}
	if !h.statusSet || h.status != "0" {
		return 0, false, nil
	}
	code, err = overallCode(h.msg)
	return code, err == nil, err
}

// send writes a call's HEADERS and DATA frames on a new stream, in one write.
func (h *h2conn) send(msg []byte) error {
	if h.stream == 0 {
		h.stream = 1
	} else {
		h.stream += 2
	}
	h.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method}, {Name: ":authority", Value: h.authority},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		if err := h.enc.WriteField(f); err != nil {
			return err
		}
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.stream, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	if err := h.fr.WriteData(h.stream, true, msg); err != nil {
		return err
	}
	h.sendWin -= int64(len(msg))
	return h.bw.Flush()
}

// readFrame reads one frame and handles it; done is the call's end (its
// stream's END_STREAM).
func (h *h2conn) readFrame() (done bool, err error) {
	f, err := h.fr.ReadFrame()
	if err != nil {
		return false, err
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		if err := h.consumed(int(f.Header().Length)); err != nil {
			return false, err
		}
		if f.StreamID == h.stream {
			h.msg = append(h.msg, f.Data()...)
		}
		return f.StreamID == h.stream && f.StreamEnded(), nil
	case *http2.HeadersFrame:
		if !f.HeadersEnded() {
			return false, errors.New("CONTINUATION frames are not supported")
		}
		if _, err := h.dec.Write(f.HeaderBlockFragment()); err != nil {
			return false, err
		}
		return f.StreamID == h.stream && f.StreamEnded(), nil
	case *http2.SettingsFrame:
		if f.IsAck() {
			return false, nil
		}
		if err := h.fr.WriteSettingsAck(); err != nil {
			return false, err
		}
		return false, h.bw.Flush()
	case *http2.PingFrame:
		if f.IsAck() {
			return false, nil
		}
		if err := h.fr.WritePing(true, f.Data); err != nil {
			return false, err
		}
		return false, h.bw.Flush()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			h.sendWin += int64(f.Increment)
		}
		return false, nil
	case *http2.RSTStreamFrame:
		if f.StreamID == h.stream {
			return false, fmt.Errorf("stream reset: %v", f.ErrCode)
		}
		return false, nil
	case *http2.GoAwayFrame:
		return false, fmt.Errorf("GOAWAY: %v", f.ErrCode)
	}
	return false, nil
}

// consumed counts n bytes of DATA against the connection's window, and
// gives them back once a quarter of the window is used, as grpc-go does.
func (h *h2conn) consumed(n int) error {
	h.unacked += n
	if h.unacked < h2ConnWindow/4 {
		return nil
	}
	if err := h.fr.WriteWindowUpdate(0, uint32(h.unacked)); err != nil {
		return err
	}
	h.unacked = 0
	return h.bw.Flush()
}

// overallCode reads field 1 (overall_code) of a RateLimitResponse in a
// gRPC message, without decoding the rest.
func overallCode(m []byte) (pb.RateLimitResponse_Code, error) {
	if len(m) < 5 || m[0] != 0 || int(binary.BigEndian.Uint32(m[1:5])) != len(m)-5 {
		return 0, fmt.Errorf("not one uncompressed gRPC message (%d bytes)", len(m))
	}
	b := m[5:]
	code := pb.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			code, b = pb.RateLimitResponse_Code(v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return code, nil
}
