package envoy

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/otpguard/otpguard/internal/limit"
)

// Match finds the rule of one descriptor as the peer finds it
// (config_impl.go GetLimit): entry by entry, the key and value the config
// names, else its first wildcard value that matches, else the key alone;
// the rule counts only when the request's last entry reaches it. key is
// the counter's subject: the request's values the rule does not fix
// (escaped, keyOf). A nil rule is a descriptor no rule covers.
func (r *Rules) Match(domain string, entries []*commonv3.RateLimitDescriptor_Entry) (rule *Rule, key string) {
	n := r.domains[domain]
	if n == nil || len(entries) == 0 {
		return nil, ""
	}
	vars := make([]string, 0, 4) // on the stack: keyOf keeps none of it
	for i, e := range entries {
		next := n.exact[[2]string{e.Key, e.Value}]
		if next == nil {
			for _, w := range n.wild {
				if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
					next = w.node
					break
				}
			}
		}
		if next == nil {
			next = n.byKey[e.Key]
		}
		if next == nil {
			return nil, ""
		}
		if next.kind == matchVariable {
			vars = append(vars, e.Value)
		}
		if i == len(entries)-1 {
			if next.rule == nil {
				return nil, ""
			}
			return next.rule, keyOf(vars)
		}
		n = next
	}
	return nil, ""
}

// errOverrideUnit is a descriptor's limit override without a unit the
// peer knows (it fails the call too).
var errOverrideUnit = errors.New("rate limit override has no valid unit")

// override is the rule of a descriptor carrying its own limit, as the
// peer's GetLimit makes it: in a domain the files name, the request's limit
// in place of any rule (no name, replaces, shadow or quota mode), counted
// per domain, unit and every entry of the descriptor. A nil rule is a
// domain no file names: OK without a limit, as the peer answers.
func (r *Rules) override(domain string, d *commonv3.RateLimitDescriptor) (*Rule, string, error) {
	if r.domains[domain] == nil || len(d.GetEntries()) == 0 {
		return nil, "", nil
	}
	lim := d.GetLimit()
	unit := typev3.RateLimitUnit_name[int32(lim.GetUnit())]
	secs := unitSeconds[unit]
	if secs == 0 {
		return nil, "", errOverrideUnit
	}
	rule := &Rule{Policy: overridePolicy(domain, unit), Seconds: secs, Override: true,
		Limit: &ratelimitv3.RateLimitResponse_RateLimit{RequestsPerUnit: lim.GetRequestsPerUnit(),
			Unit: ratelimitv3.RateLimitResponse_RateLimit_Unit(ratelimitv3.RateLimitResponse_RateLimit_Unit_value[unit])}}
	parts := make([]string, 0, 2*len(d.Entries))
	for _, e := range d.Entries {
		parts = append(parts, e.Key, e.Value)
	}
	return rule, keyOf(parts), nil
}

// wildcardMatch reports whether value matches a pattern split on '*':
// each '*' matches any run of characters, in order.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// keyOf is the counter's subject for a rule's variable values: each value
// escaped (a byte limit.ValidateKey refuses, '.' and '=' become "=XX", an
// empty value "="), joined by '.'; "-" when there are none. Longer than
// limit.MaxKeyLength less room for the window, it is "=H" and a digest:
// "=H" is no escape, so no escaped key looks like one.
func keyOf(vars []string) string {
	switch {
	case len(vars) == 0:
		return "-"
	case len(vars) == 1 && plainString(vars[0]):
		return vars[0] // the common case, and no copy of it
	}
	var b strings.Builder
	for i, v := range vars {
		if i > 0 {
			b.WriteByte('.')
		}
		if v == "" {
			b.WriteByte('=')
		}
		for j := 0; j < len(v); j++ {
			c := v[j]
			if plain(c) {
				b.WriteByte(c)
				continue
			}
			b.WriteByte('=')
			b.WriteByte("0123456789ABCDEF"[c>>4])
			b.WriteByte("0123456789ABCDEF"[c&15])
		}
	}
	if b.Len() > maxSubject {
		sum := sha256.Sum256([]byte(b.String()))
		return "=H" + base64.RawURLEncoding.EncodeToString(sum[:18])
	}
	return b.String()
}

// maxSubject leaves room in a key for ":" and a window's start.
const maxSubject = limit.MaxKeyLength - 12

// plainString reports whether v needs no escape and fits as a subject.
func plainString(v string) bool {
	if v == "" || len(v) > maxSubject {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !plain(v[i]) {
			return false
		}
	}
	return true
}

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == ':' || c == '@' || c == '/' || c == '+' || c == '-'
}

// windowKey is key in the window of secs seconds under way at now (Unix
// seconds): the peer's key carries the window's start the same way, so a
// window ends on the unit's boundary, not a unit after its first hit.
func windowKey(key string, secs, now int64) string {
	var start [20]byte
	return key + ":" + string(strconv.AppendInt(start[:0], now/secs*secs, 10)) // one allocation
}
