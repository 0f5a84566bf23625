package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
)

// AbuseCounters keeps the attack view's counters and alerts, and reads
// the velocity counters and the spend budget for it.
type AbuseCounters struct{ keyspace }

var _ ops.AbuseCounters = (*AbuseCounters)(nil)

// The attack view's counters (ops/abuse.go):
//
//	<prefix>ops:abuse:{abuse}:c:<hour>  hash, countries' sent/verified/refused
//	<prefix>ops:abuse:{abuse}:p:<hour>  hash, prefixes' sent/verified/refused
//	<prefix>ops:abuse:{abuse}:k:<hour>  hash, carriers' (per country) sent/verified/refused
//	<prefix>ops:abuse:{abuse}:s:<hour>  hash, services' (per country) sent/verified/refused
//	<prefix>ops:abuse:{abuse}:alerts    hash, rule|scope|subject[|service] -> "<until> <json>"
//
// One hash tag, so that one script writes them all on Redis Cluster.

func abuseKey(name string) limit.Key { return limit.Key{Space: "ops:abuse", ID: "abuse", Name: name} }

// maxAlerts bounds the alerts hash: past it, ended alerts are pruned.
const maxAlerts = 200

// abuseScript adds one hour's counts (and the alerts) in one atomic step
// (lua/add_abuse_counts.lua).
var abuseScript = script("add_abuse_counts")

type alertJSON struct {
	Scope   string    `json:"scope"`
	Subject string    `json:"subject"`
	Country string    `json:"country"`
	Rule    string    `json:"rule"`
	Service string    `json:"service,omitempty"`
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
	Until   time.Time `json:"until"`
	Detail  string    `json:"detail"`
}

// AddAbuse adds the attack view's counts, one script per hour (the alerts
// travel with the first).
func (r *AbuseCounters) AddAbuse(ctx context.Context, counts []ops.AbuseCounts, alerts []ops.AbuseAlert, now time.Time) error {
	if len(counts) == 0 {
		counts = []ops.AbuseCounts{{Hour: now.Unix() / 3600}}
	}
	ttl := int64(ops.AbuseTTL / time.Second)
	for i, c := range counts {
		args := []any{ttl, ops.MaxCountryFields, ops.MaxPrefixFields, now.Unix(), maxAlerts, ops.MaxCarrierFields, ops.MaxServiceFields}
		for _, m := range []map[string]int64{c.Countries, c.Prefixes, c.Carriers, c.Services} {
			args = append(args, len(m))
			for f, d := range m {
				args = append(args, f, d)
			}
		}
		if i > 0 {
			alerts = nil
		}
		args = append(args, len(alerts))
		for _, a := range alerts {
			v, err := json.Marshal(alertJSON(a))
			if err != nil {
				return fmt.Errorf("store: add abuse: %w", err)
			}
			args = append(args, alertField(a), strconv.FormatInt(a.Until.Unix(), 10)+" "+string(v))
		}
		hs := strconv.FormatInt(c.Hour, 10)
		keys := []string{r.key(abuseKey("c:" + hs)), r.key(abuseKey("p:" + hs)), r.key(abuseKey("k:" + hs)), r.key(abuseKey("s:" + hs)),
			r.key(abuseKey("alerts"))}
		if err := abuseScript.Run(ctx, r.rdb, keys, args...).Err(); err != nil {
			return fmt.Errorf("store: add abuse: %w", err)
		}
	}
	return nil
}

// alertField is a's field in the alerts hash: its rule, scope and
// subject, and its service when it is a named service's (the default
// service's alerts keep the field they had before services).
func alertField(a ops.AbuseAlert) string {
	f := a.Rule + "|" + a.Scope + "|" + a.Subject
	if a.Service != guard.DefaultService {
		f += "|" + a.Service
	}
	return f
}

// pipeliner is what reading the attack view needs: a plain pipeline,
// whose commands may span hash slots (go-redis splits it per node).
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

func (r *AbuseCounters) pipeline() (redis.Pipeliner, error) {
	p, ok := r.rdb.(pipeliner)
	if !ok {
		return nil, errors.New("store: the redis client cannot pipeline")
	}
	return p.Pipeline(), nil
}

// ReadAbuse reads the hours' counters, the alerts and the spend budget in
// one round trip (on Cluster, one per node, concurrently).
func (r *AbuseCounters) ReadAbuse(ctx context.Context, hours []int64) (ops.AbuseData, error) {
	pipe, err := r.pipeline()
	if err != nil {
		return ops.AbuseData{}, err
	}
	type hourCmds struct{ c, p, k, s *redis.MapStringStringCmd }
	hcs := make([]hourCmds, len(hours))
	for i, h := range hours {
		hs := strconv.FormatInt(h, 10)
		hcs[i] = hourCmds{pipe.HGetAll(ctx, r.key(abuseKey("c:"+hs))), pipe.HGetAll(ctx, r.key(abuseKey("p:"+hs))),
			pipe.HGetAll(ctx, r.key(abuseKey("k:"+hs))), pipe.HGetAll(ctx, r.key(abuseKey("s:"+hs)))}
	}
	alerts := pipe.HGetAll(ctx, r.key(abuseKey("alerts")))
	hk, dk := guard.BudgetKeys()
	bh, bhTTL := pipe.Get(ctx, r.key(hk)), pipe.PTTL(ctx, r.key(hk))
	bd, bdTTL := pipe.Get(ctx, r.key(dk)), pipe.PTTL(ctx, r.key(dk))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return ops.AbuseData{}, fmt.Errorf("store: read abuse: %w", err)
	}
	var out ops.AbuseData
	for i, h := range hours {
		out.Hours = append(out.Hours, ops.AbuseHour{Hour: h, Countries: intFields(hcs[i].c.Val()), Prefixes: intFields(hcs[i].p.Val()),
			Carriers: intFields(hcs[i].k.Val()), Services: intFields(hcs[i].s.Val())})
	}
	for _, v := range alerts.Val() {
		_, js, ok := cutSpace(v)
		var a alertJSON
		if !ok || json.Unmarshal([]byte(js), &a) != nil {
			continue
		}
		out.Alerts = append(out.Alerts, ops.AbuseAlert(a))
	}
	out.BudgetHr = budgetWindow(bh, bhTTL)
	out.BudgetDay = budgetWindow(bd, bdTTL)
	return out, nil
}

func cutSpace(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func intFields(m map[string]string) map[string]int64 {
	out := make(map[string]int64, len(m))
	for f, v := range m {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[f] = n
		}
	}
	return out
}

func budgetWindow(v *redis.StringCmd, ttl *redis.DurationCmd) ops.BudgetWindow {
	n, _ := strconv.ParseInt(v.Val(), 10, 64)
	w := ops.BudgetWindow{Used: n}
	if d := ttl.Val(); d > 0 {
		w.ResetsIn = d
	}
	return w
}

// ReadVolumes reads the countries' velocity counters for hour: the sends
// counted, the baseline (if computed this hour) and the quarantine.
func (r *AbuseCounters) ReadVolumes(ctx context.Context, regions []string, hour int64) ([]ops.CountryVolume, error) {
	if len(regions) == 0 {
		return nil, nil
	}
	pipe, err := r.pipeline()
	if err != nil {
		return nil, err
	}
	hs := strconv.FormatInt(hour, 10)
	type cmds struct {
		h *redis.SliceCmd
		q *redis.StringCmd
	}
	cs := make([]cmds, len(regions))
	for i, reg := range regions {
		k, q := guard.VelocityKeys(reg)
		cs[i] = cmds{pipe.HMGet(ctx, r.key(k), "s:"+hs, "b:"+hs), pipe.Get(ctx, r.key(q))}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: read volumes: %w", err)
	}
	out := make([]ops.CountryVolume, len(regions))
	for i, c := range cs {
		v := ops.CountryVolume{Baseline: -1}
		if vals := c.h.Val(); len(vals) == 2 {
			v.Sends = anyInt(vals[0], 0)
			v.Baseline = anyInt(vals[1], -1)
		}
		if u, err := strconv.ParseInt(c.q.Val(), 10, 64); err == nil {
			v.QuarantineUntil = time.Unix(u, 0)
		}
		out[i] = v
	}
	return out, nil
}

func anyInt(v any, def int64) int64 {
	s, ok := v.(string)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return def
	}
	return n
}
