package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// isSend says whether request i of a mixed load is an OTP send: SendShare
// of the requests, spread evenly.
func (c *Config) isSend(i uint64) bool {
	if c.SendShare <= 0 {
		return false
	}
	return uint64(float64(i+1)*c.SendShare) > uint64(float64(i)*c.SendShare)
}

type sendJSON struct {
	Phone    string `json:"phone"`
	ClientIP string `json:"client_ip"`
}

// sendBody is the JSON of send j: a number and a /64 of its own, so that
// no per-number or per-IP limit refuses it (a refusal here is a 429, and
// what the mixed load looks for is 503s).
func (c *Config) sendBody(j uint64) []byte {
	b, _ := json.Marshal(sendJSON{
		Phone:    fmt.Sprintf("%s%06d", c.PhonePrefix, j%1_000_000),
		ClientIP: c.IPPrefix + strconv.FormatUint(j%0x10000, 16) + "::1",
	})
	return b
}

// printSends reports the status codes of the sends of a mixed load.
func printSends(out io.Writer, codes map[int]uint64) {
	var total uint64
	parts := make([]string, 0, len(codes))
	for code, n := range codes {
		total += n
		parts = append(parts, fmt.Sprintf("%d: %d", code, n))
	}
	slices.Sort(parts)
	fmt.Fprintf(out, "sends         %d POST /otp/send: %s; refused with 503: %d\n", total, strings.Join(parts, "  "), codes[503])
}
