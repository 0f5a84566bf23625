package envoy

import (
	"fmt"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/otpguard/otpguard/internal/limit"
)

// Rules are the configuration files, loaded: per domain a tree of
// descriptors, and the limit policy of each rule.
type Rules struct {
	domains map[string]*node
	// Policies are the limit policies of the rules that limit (not the
	// unlimited ones), by name: domain and descriptor path, e.g.
	// messaging.message_type=marketing.to_number; and per domain one for
	// each unit a request's own limit may have (a descriptor's limit
	// override), e.g. "messaging (limit override per minute)".
	Policies map[string]limit.Policy
	// Notes are what the files ask that otpguard accepts without acting
	// on it (the peer's statsd naming, metadata), for the start-up log.
	Notes []string
}

// node is one level of a domain's descriptors: what the next entry of a
// request may match.
type node struct {
	exact map[[2]string]*node // key and value
	byKey map[string]*node    // key alone: any value
	wild  []wildEntry         // key and a value with '*', in file order
	rule  *Rule
	// kind says whether the entry it matched is part of the counter's key:
	// matchFixed (a value the config names, or a shared wildcard) or not.
	kind matchKind
}

type matchKind uint8

const (
	matchVariable matchKind = iota // the request's value: its own counter
	matchFixed                     // the config's value: one counter for all
)

type wildEntry struct {
	key   string
	parts []string // the value split on '*'
	node  *node
}

// Rule is one descriptor with a rate_limit.
type Rule struct {
	Policy    string // the limit policy; "" when Unlimited
	Name      string // rate_limit.name, for replaces
	Replaces  []string
	Unlimited bool
	Shadow    bool
	Quota     bool
	Bucket    bool  // the extension's token_bucket: no aligned window
	Override  bool  // the request's own limit (Limit), not a file's
	Seconds   int64 // the unit, as the peer divides time by it
	// Limit is the status's current_limit, shared by every answer.
	Limit *ratelimitv3.RateLimitResponse_RateLimit
}

// unitSeconds is the peer's divider of each unit (utils.UnitToDivider): a
// month is 30 days and a year 365, and windows start at multiples of it
// since the Unix epoch.
var unitSeconds = map[string]int64{
	"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400,
	"WEEK": 7 * 86400, "MONTH": 30 * 86400, "YEAR": 365 * 86400,
}

// Load builds the rules of files, refusing what otpguard cannot honour
// and naming the file and descriptor.
func Load(files []File) (*Rules, error) {
	r := &Rules{domains: map[string]*node{}, Policies: map[string]limit.Policy{}}
	from := map[string]string{}
	for _, f := range files {
		d := f.root.Domain
		switch {
		case d == "":
			return nil, fmt.Errorf("%s: config file cannot have empty domain", f.Name)
		case from[d] != "":
			return nil, fmt.Errorf("%s: duplicate domain %q in config file (also in %s)", f.Name, d, from[d])
		case strings.ContainsAny(d, "{}"):
			return nil, fmt.Errorf("%s: domain %q: otpguard refuses { and } in a domain, key or value (they would break the hash tag of its Redis keys)", f.Name, d)
		}
		from[d] = f.Name
		root := newNode(matchFixed)
		if err := r.load(f.Name, d, root, f.root.Descriptors); err != nil {
			return nil, err
		}
		r.domains[d] = root
		if err := r.addOverrides(f.Name, d); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// overrideUnits are the units a descriptor's limit override may name
// (envoy.type.v3.RateLimitUnit), in the peer's spelling.
var overrideUnits = []string{"SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR"}

// overridePolicy names the policy that counts domain's descriptors
// carrying their own limit in unit.
func overridePolicy(domain, unit string) string {
	return domain + " (limit override per " + strings.ToLower(unit) + ")"
}

// addOverrides adds domain's policies for descriptors carrying their own
// limit: a fixed window per unit, its limit the request's.
func (r *Rules) addOverrides(file, domain string) error {
	for _, unit := range overrideUnits {
		name := overridePolicy(domain, unit)
		if _, taken := r.Policies[name]; taken {
			return fmt.Errorf("%s: domain %q: the policy name of its limit overrides, %q, is taken by another domain's descriptor", file, domain, name)
		}
		r.Policies[name] = limit.Policy{Algorithm: limit.FixedWindow, Window: time.Duration(unitSeconds[unit]) * time.Second,
			OnStoreError: limit.FallbackOpen, Independent: true}
	}
	return nil
}

func newNode(k matchKind) *node {
	return &node{exact: map[[2]string]*node{}, byKey: map[string]*node{}, kind: k}
}

// load adds descs under n; path is the policy name so far.
func (r *Rules) load(file, path string, n *node, descs []fileDescriptor) error {
	for _, d := range descs {
		here := path + "." + d.Key
		if d.Value != "" {
			here += "=" + d.Value
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s: descriptor %s: %s", file, here, fmt.Sprintf(format, args...))
		}
		switch {
		case d.Key == "":
			return fmt.Errorf("%s: descriptor under %s has empty key", file, path)
		case strings.ContainsAny(d.Key+d.Value, "{}"):
			return bad("otpguard refuses { and } in a domain, key or value (they would break the hash tag of its Redis keys)")
		case d.ShareThreshold && !strings.Contains(d.Value, "*"):
			return bad("share_threshold can only be used with wildcard values (containing '*')")
		}
		kind := matchVariable
		if d.Value != "" && (!strings.Contains(d.Value, "*") || d.ShareThreshold) {
			kind = matchFixed
		}
		child := newNode(kind)
		switch {
		case d.Value == "":
			if n.byKey[d.Key] != nil {
				return bad("duplicate descriptor composite key")
			}
			n.byKey[d.Key] = child
		default:
			k := [2]string{d.Key, d.Value}
			if n.exact[k] != nil {
				return bad("duplicate descriptor composite key")
			}
			n.exact[k] = child
			if strings.Contains(d.Value, "*") {
				n.wild = append(n.wild, wildEntry{key: d.Key, parts: strings.Split(d.Value, "*"), node: child})
			}
		}
		if d.DetailedMetric || d.ValueToMetric {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s: detailed_metric and value_to_metric only shape the peer's statsd names; otpguard's metrics are by policy", file, here))
		}
		if len(d.Metadata.Rest) > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s: metadata is accepted and not sent back in dynamic_metadata", file, here))
		}
		if d.RateLimit != nil {
			rule, pol, err := ruleOf(here, d)
			if err != nil {
				return bad("%s", err)
			}
			child.rule = rule
			if !rule.Unlimited {
				if _, taken := r.Policies[here]; taken { // across domains: "a" + "b.c" and "a.b" + "c"
					return bad("its policy name is taken by another domain's descriptor or limit overrides")
				}
				r.Policies[here] = pol
			}
		} else if d.Metadata.OTPGuard != nil {
			return bad("metadata.otpguard needs a rate_limit beside it")
		} else if d.ShadowMode || d.QuotaMode {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: %s: shadow_mode and quota_mode without a rate_limit change nothing", file, here))
		}
		if err := r.load(file, here, child, d.Descriptors); err != nil {
			return err
		}
	}
	return nil
}

// ruleOf is the rule and limit policy of a descriptor with a rate_limit.
func ruleOf(name string, d fileDescriptor) (*Rule, limit.Policy, error) {
	rl := d.RateLimit
	unit := strings.ToUpper(rl.Unit)
	secs, valid := unitSeconds[unit]
	switch {
	case rl.Unlimited && valid:
		return nil, limit.Policy{}, fmt.Errorf("should not specify rate limit unit when unlimited")
	case rl.Unlimited && d.Metadata.OTPGuard != nil:
		return nil, limit.Policy{}, fmt.Errorf("metadata.otpguard has nothing to shape on an unlimited rule")
	case !rl.Unlimited && !valid:
		return nil, limit.Policy{}, fmt.Errorf("invalid rate limit unit '%s' (second, minute, hour, day, week, month or year)", rl.Unit)
	}
	rule := &Rule{Name: rl.Name, Unlimited: rl.Unlimited, Shadow: d.ShadowMode, Quota: d.QuotaMode, Seconds: secs}
	for _, rep := range rl.Replaces {
		switch {
		case rep.Name == "":
			return nil, limit.Policy{}, fmt.Errorf("should not have an empty replaces entry")
		case rep.Name == rl.Name:
			return nil, limit.Policy{}, fmt.Errorf("replaces should not contain name of same descriptor")
		}
		rule.Replaces = append(rule.Replaces, rep.Name)
	}
	if rl.Unlimited {
		return rule, limit.Policy{}, nil
	}
	rule.Policy = name
	rule.Limit = &ratelimitv3.RateLimitResponse_RateLimit{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit,
		Unit: ratelimitv3.RateLimitResponse_RateLimit_Unit(ratelimitv3.RateLimitResponse_RateLimit_Unit_value[unit])}
	pol := limit.Policy{Algorithm: limit.FixedWindow, Limit: int64(rl.RequestsPerUnit),
		Window: time.Duration(secs) * time.Second, Shadow: d.ShadowMode,
		OnStoreError: limit.FallbackOpen, Independent: true}
	if x := d.Metadata.OTPGuard; x != nil {
		var err error
		if pol, err = extend(pol, *x, secs); err != nil {
			return nil, limit.Policy{}, fmt.Errorf("metadata.otpguard: %w", err)
		}
		rule.Bucket = pol.Algorithm == limit.TokenBucket
	}
	return rule, pol, nil
}

// extend applies a rule's metadata.otpguard to its policy.
func extend(p limit.Policy, x Extension, secs int64) (limit.Policy, error) {
	switch x.Algorithm {
	case "", string(limit.FixedWindow):
		if x.Capacity != 0 || x.RefillPerSecond != 0 {
			return p, fmt.Errorf("capacity and refill_per_second belong to algorithm: token_bucket")
		}
	case string(limit.TokenBucket):
		p.Algorithm, p.Capacity, p.RefillPerSecond = limit.TokenBucket, p.Limit, float64(p.Limit)/float64(secs)
		if x.Capacity != 0 {
			p.Capacity = x.Capacity
		}
		if x.RefillPerSecond != 0 {
			p.RefillPerSecond = x.RefillPerSecond
		}
		if p.Capacity < 1 || !(p.RefillPerSecond > 0) {
			return p, fmt.Errorf("a token bucket needs a capacity of at least 1 and a refill above 0 (requests_per_unit 0 cannot make one)")
		}
		p.Limit, p.Window = 0, 0
	default:
		return p, fmt.Errorf("algorithm must be fixed_window or token_bucket, got %q", x.Algorithm)
	}
	switch limit.FallbackMode(x.OnStoreError) {
	case "":
	case limit.FallbackOpen, limit.FallbackClosed:
		p.OnStoreError = limit.FallbackMode(x.OnStoreError)
	case limit.FallbackLocal:
		if x.LocalLimit < 1 {
			return p, fmt.Errorf("on_store_error: local needs a local_limit of at least 1")
		}
		p.OnStoreError, p.LocalLimit = limit.FallbackLocal, x.LocalLimit
	default:
		return p, fmt.Errorf("on_store_error must be open, local or closed, got %q", x.OnStoreError)
	}
	if x.LocalLimit != 0 && p.OnStoreError != limit.FallbackLocal {
		return p, fmt.Errorf("local_limit only applies with on_store_error: local")
	}
	switch limit.Mode(x.Mode) {
	case "", limit.ModeExact:
		if x.SyncInterval != "" {
			return p, fmt.Errorf("sync_interval only applies with mode: sync")
		}
	case limit.ModeSync:
		if p.Algorithm != limit.TokenBucket {
			return p, fmt.Errorf("mode: sync needs algorithm: token_bucket (an Envoy window counts every hit, which hot keys do not)")
		}
		p.Mode, p.SyncInterval = limit.ModeSync, limit.DefaultSyncInterval
		if x.SyncInterval != "" {
			d, err := time.ParseDuration(x.SyncInterval)
			if err != nil || d < 10*time.Millisecond || d > time.Minute {
				return p, fmt.Errorf("sync_interval must be a duration between 10ms and 1m, got %q", x.SyncInterval)
			}
			p.SyncInterval = d
		}
	default:
		return p, fmt.Errorf("mode must be exact or sync, got %q", x.Mode)
	}
	return p, nil
}
